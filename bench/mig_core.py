"""Benchmark of the MIG core: parse, validate (catalogue and node mode), placement search.

Prints figures next to their targets; no pass/fail. Run directly or through bench/run.py
(`make bench`). Takes well under a minute on 2 cores.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import migops.mig.placement as placement
from migops.mig.catalogue import catalogue
from migops.mig.fit import NodeGpus, fit_all
from migops.mig.spec import parse_config
from migops.mig.validate import validate

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "examples" / "nvidia-default-config.yaml"
ns = time.perf_counter_ns


def sample(fn, runs: int, setup=None) -> list[int]:
    """Wall time of `fn()` in ns, `runs` times (after one warm-up call)."""
    if setup:
        setup()
    fn()
    out = []
    for _ in range(runs):
        if setup:
            setup()
        t0 = ns()
        fn()
        out.append(ns() - t0)
    return out


def p90(values: list[int]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def ms(v: float) -> str:
    return f"{v / 1e6:8.2f} ms"


def us(v: float) -> str:
    return f"{v / 1e3:8.1f} µs"


def row(label: str, median: str, p90_: str, target: str) -> None:
    print(f"  {label:<62} {median:>11} {p90_:>11}   {target}")


def header(title: str) -> None:
    print(f"\n{title}")
    print(f"  {'':<62} {'median':>11} {'p90':>11}   target")


def clear_place_cache() -> None:
    placement._CACHE.clear()


def uncached_search(table, request) -> tuple | None:
    return placement.search_layout(table, placement._order(table, placement.expand(request)))


def all_multisets(table):
    """Every multiset of the table's profiles with counts 0..max_count whose memory fits the GPU."""
    profiles = table.profiles

    def rec(i, memory, current):
        if i == len(profiles):
            yield dict(current)
            return
        gi = profiles[i]
        for count in range(gi.max_count + 1):
            if memory + count * gi.memory_slices > table.memory_slices:
                break
            if count:
                current[gi] = count
            yield from rec(i + 1, memory + count * gi.memory_slices, current)
            current.pop(gi, None)

    yield from rec(0, 0, {})


def main() -> int:
    started = ns()
    cat = catalogue()
    text = DEFAULT_CONFIG.read_text()
    print(
        f"MIG core benchmark (Python {sys.version.split()[0]}; {len(cat.gpus)} GPUs, {len(cat.tables)} profile "
        f"tables; config {DEFAULT_CONFIG.name})"
    )

    # (d) parse
    header("Parse")
    t = sample(lambda: parse_config(text), 50)
    row("parse NVIDIA default config (81 configs)", ms(statistics.median(t)), ms(p90(t)), "(none)")
    config = parse_config(text)

    # (a) validate, catalogue mode and node mode
    header("Validate")
    reports = validate(config)
    assert len(reports) == 81 and all(r.valid for r in reports), "the default config must validate"
    t = sample(lambda: validate(config), 50)
    row(
        f"catalogue mode, all 81 configs x {len(cat.gpus)} GPUs (warm)", ms(statistics.median(t)), ms(p90(t)), "< 20 ms"
    )
    t = sample(lambda: validate(config), 50, setup=clear_place_cache)
    row("catalogue mode, placement cache cleared each run", ms(statistics.median(t)), ms(p90(t)), "< 20 ms")
    t = sample(lambda: (parse_config(text), validate(config)), 20)
    row("parse + catalogue mode (warm)", ms(statistics.median(t)), ms(p90(t)), "(none)")
    per_gpu = []
    for gpu in cat.gpus:
        t = sample(lambda g=gpu: validate(config, node=[g]), 20)
        per_gpu.append((statistics.median(t), p90(t), gpu))
    for med, high, gpu in per_gpu:
        row(f"node mode, 81 configs on 1 x {gpu.name} ({gpu.device_id})", ms(med), ms(high), "< 20 ms")
    t = sample(lambda: validate(config, node=[cat.by_device_id("0x233010DE")] * 8, strategy="mixed"), 20)
    row("node mode, 81 configs on 8 x H100-SXM5-80GB, mixed", ms(statistics.median(t)), ms(p90(t)), "< 20 ms")
    # What `migops validate --gpu` asks (migops.mig.fit): the node's report and the text's own errors
    # (catalogue mode under the same strategy).
    h100x8 = NodeGpus((cat.by_device_id("0x233010DE"),) * 8, True)
    t = sample(lambda: fit_all(config, None, h100x8, "mixed"), 20)
    row("fit (node + the text's errors), 81 configs on 8 x H100, mixed", ms(statistics.median(t)), ms(p90(t)), "(none)")

    # Counts are judged by arithmetic: a count of 2^63-1 (mig-parted's largest) costs what 7 does.
    header("Huge counts (one config, count 2^63-1)")
    huge = (
        'version: v1\nmig-configs:\n  huge:\n    - devices: all\n      mig-enabled: true\n'
        '      mig-devices: {"1g.10gb": 9223372036854775807, "1c.7g.80gb": 9223372036854775807}\n'
    )
    huge_config = parse_config(huge)
    assert not validate(huge_config)[0].valid
    t = sample(lambda: validate(parse_config(huge)), 50)
    row("parse + catalogue mode (every model)", ms(statistics.median(t)), ms(p90(t)), "< 10 ms")
    node8 = [cat.by_device_id("0x233010DE")] * 8
    t = sample(lambda: validate(parse_config(huge), node=node8), 50)
    row("parse + node mode, 8 x H100-SXM5-80GB", ms(statistics.median(t)), ms(p90(t)), "< 10 ms")

    # (b) one placement search
    header("Placement search (one GPU)")
    h100 = next(t for t in cat.tables if t.id == "h100-80gb")
    by_name = {gi.name: gi for gi in h100.profiles}
    balanced = {by_name["1g.10gb"]: 2, by_name["2g.20gb"]: 1, by_name["3g.40gb"]: 1}
    seven = {by_name["1g.10gb"]: 7}
    for label, request in (("H100 all-balanced (2x1g + 2g + 3g)", balanced), ("H100 7 x 1g.10gb", seven)):
        t = sample(lambda r=request: uncached_search(h100, r), 2000)
        row(f"search_layout, uncached: {label}", us(statistics.median(t)), us(p90(t)), "< 100 µs")
        t = sample(lambda r=request: placement.place(h100, r), 2000)
        row(f"place(), cached: {label}", us(statistics.median(t)), us(p90(t)), "< 100 µs")
    a100 = next(t for t in cat.tables if t.id == "a100-40gb")
    current = placement.place(a100, {gi: 7 for gi in a100.profiles if gi.name == "1g.5gb"})
    desired = {gi: c for gi in a100.profiles for name, c in (("3g.20gb", 1), ("1g.5gb", 3)) if gi.name == name}
    t = sample(lambda: placement.plan_change(a100, current, desired), 500)
    row("plan_change A100-40: 7x1g.5gb -> 3g.20gb + 3x1g.5gb", us(statistics.median(t)), us(p90(t)), "(none)")

    # (c) worst case over every multiset of every table
    print(
        "\nPlacement search, every multiset of every table (counts 0..max_count, within memory), "
        "uncached, best of 5 each"
    )
    print(f"  {'table':<20} {'multisets':>9} {'feasible':>9} {'median':>10} {'worst':>10}   worst multiset")
    total = 0
    overall = (0, None, None)
    for table in cat.tables:
        times = []
        feasible = 0
        worst = (0, None)
        for request in all_multisets(table):
            best = min(_timed(table, request) for _ in range(5))
            times.append(best)
            if uncached_search(table, request) is not None:
                feasible += 1
            if best > worst[0]:
                worst = (best, request)
        total += len(times)
        shown = " + ".join(f"{c}x{gi.name}" for gi, c in worst[1].items()) or "(empty)"
        print(
            f"  {table.id:<20} {len(times):>9} {feasible:>9} {us(statistics.median(times)):>10} "
            f"{us(worst[0]):>10}   {shown}"
        )
        if worst[0] > overall[0]:
            overall = (worst[0], table.id, shown)
    print(
        f"  {'all tables':<20} {total:>9} {'':>9} {'':>10} {us(overall[0]):>10}   {overall[1]}: {overall[2]}"
        "   (target < 100 µs)"
    )

    print(f"\nbenchmark took {(ns() - started) / 1e9:.1f} s")
    return 0


def _timed(table, request) -> int:
    t0 = ns()
    uncached_search(table, request)
    return ns() - t0


if __name__ == "__main__":
    sys.exit(main())
