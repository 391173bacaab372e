"""Short lists in messages: the one way migops writes "a, b and 3 more" (every component's messages)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable


def listed(items: Iterable[object], most: int, *, sep: str = ", ", more: str = "more", total: int | None = None) -> str:
    """The first `most` items joined by `sep`, then " and N more" for the rest (nothing when none
    is left out): `listed(["a", "b", "c", "d"], 2)` is "a, b and 2 more". `more` names what is
    counted ("more rules"); a generator is read once. With `total` (how many there are), only the
    first `most` items are read: a lazy sequence of thousands is never walked."""
    items = list(itertools.islice(items, most)) if total is not None else list(items)
    shown = sep.join(map(str, items[:most]))
    left = (total if total is not None else len(items)) - most
    return f"{shown} and {left} {more}" if left > 0 else shown
