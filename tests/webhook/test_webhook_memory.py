"""The webhook's caches hold what their bounds say: entries are weighed by the bytes
they really hold (memory.retained), checked here against tracemalloc's count of what building them
allocated, and a remembered parse failure holds no frames (of the parser, or of the reviews that
were answered with it)."""

from __future__ import annotations

import gc
import sys
import tracemalloc
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import _fuzz  # bench/_fuzz.py: realistic objects
import _shapes  # bench/_shapes.py: large admissible configs

from migops.mig import problems
from migops.mig.catalogue import GpuModel
from migops.mig.problems import MigError
from migops.mig.spec import parse_config
from migops.webhook import checks
from migops.webhook.cache import LRU
from migops.webhook.memory import retained


@dataclass(frozen=True)
class _Record:
    a: object
    b: object
    c: object


def _allocated(build: Any) -> tuple[Any, int]:
    """What build() returns and the bytes it left allocated (tracemalloc), memos of the core cleared."""
    build()  # imports, memos of the first call
    problems.key_path.cache_clear()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        value = build()
        problems.key_path.cache_clear()
        gc.collect()
        return value, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "name, build",
    [
        ("default config, parsed", lambda: parse_config(_fuzz.DEFAULT_CONFIG)),
        ("200 KB of distinct configs, parsed", lambda: parse_config(_shapes.distinct(configs=1500, seed=3))),
        ("records with instance attributes", lambda: [_Record(i, f"v{i}" * 3, (i, i)) for i in range(20_000)]),
        ("a dict of str keys", lambda: {f"mig-configs.name-{i}": i for i in range(20_000)}),
        ("the report memo, 300 configs", lambda: _reports(300)),
    ],
)
def test_retained_bytes_agree_with_tracemalloc(name: str, build: Any) -> None:
    """Within 20% of what tracemalloc counts, both ways: the estimates it replaced were off by 2x and
    more (a report's key pinned its file's parsed entries; a dict's str keys went uncounted)."""
    checks.forget()
    value, allocated = _allocated(build)
    measured = retained(value, shared=(GpuModel,))
    assert 0.8 <= measured / allocated <= 1.2, (name, measured, allocated)
    checks.forget()


def _reports(configs: int) -> list:
    """What the report memo holds after judging a file: its entries (keys and reports)."""
    checks.forget()
    config = parse_config(_shapes.distinct(configs=configs, seed=configs))
    checks.on_catalogue(config, config.names())
    return list(checks._reports._items.items())


def test_the_memos_stay_within_their_bytes(monkeypatch) -> None:
    """Distinct files parsed and judged until each memo has evicted many times over: what stays
    allocated is what the two bounds allow (the key_path memo of the core cleared, it has its own
    bound), and it all goes with forget()."""
    monkeypatch.setattr(checks, "_parsed", LRU(2 << 20))
    monkeypatch.setattr(checks, "_reports", LRU(1 << 20))
    texts = [_shapes.distinct(configs=300, seed=s) for s in range(12)]  # ~35 KB each: ~0.7 MB parsed
    checks.parse(texts[0])
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for text in texts:
            config = checks.parse(text)
            checks.on_catalogue(config, config.names())
        del config
        problems.key_path.cache_clear()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        assert checks._parsed._weight <= 2 << 20 and checks._reports._weight <= 1 << 20
        assert held <= 1.2 * (3 << 20), held
        checks.forget()
        gc.collect()
        assert tracemalloc.get_traced_memory()[0] - before < 1 << 20  # the core's small bounded memos
    finally:
        tracemalloc.stop()
        checks.forget()


def test_a_remembered_parse_failure_holds_no_review() -> None:
    """A bad text is parsed once and its failure raised to every review that sends it again. Kept as
    an exception, it held the frames it was raised through: the parser's (the text, everything read
    from it) and each review's (its request, up to megabytes)."""
    bad = "version: v1\nmig-configs:\n  x: [{devices: all, mig-enabled: true, mig-devices: {1g.10gb: ²}}]\n"

    class Body:
        pass

    def review() -> weakref.ref:
        body = Body()  # what a review's frame holds while it is judged
        try:
            checks.parse(bad)
        except MigError as exc:
            assert "1g.10gb" in str(exc)
        return weakref.ref(body)

    checks.forget()
    first, second = review(), review()
    gc.collect()
    assert first() is None and second() is None, "a cached failure keeps a review's frame alive"
    checks.forget()


def test_a_verdicts_weight_covers_what_it_holds() -> None:
    """The verdict cache weighs a verdict by its serialised response (Verdict.weight): at least what
    it really holds, for allowances, denials with long messages and warnings, and patches."""
    import json as _json

    app = _fuzz.app()
    client = app.test_client()
    for path, doc in _fuzz.seeds():
        client.post(path, data=_json.dumps(doc), content_type="application/json")
    verdicts = list(app.extensions["migops.verdicts"]._items.values())
    assert len(verdicts) > 10
    for verdict, weight in verdicts:
        assert retained(verdict) <= weight, (verdict, retained(verdict), weight)
