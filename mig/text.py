"""Short lists and suggestions in messages: the one way migops writes "a, b and 3 more" and names the
nearest of a mistyped name (every component's messages)."""

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


def nearest(word: str, names: Iterable[str]) -> str | None:
    """The one of `names` nearest to a mistyped `word` (difflib's ratio, 0.6 or more), None when no name
    is that near."""
    import difflib  # only when a name is wrong: most commands never need it

    found = difflib.get_close_matches(word, list(names), n=1)
    return found[0] if found else None


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """`; did you mean 'name'?` for the nearest of `names`, or "" when none is near."""
    near = nearest(word, names)
    return f"; did you mean {near!r}?" if near else ""
