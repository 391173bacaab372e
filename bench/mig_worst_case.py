"""Worst-case benchmark of the MIG core: large files that the input bounds admit.

For each shape of bench/_shapes.py (the largest admissible shapes) it prints the file's size,
the time to parse it, to validate every config against the catalogue and on an 8-GPU node (8 x H100,
and 8 different models), and the verdict's total: parse + validate, timed as one call from the text
(what the webhook spends on one write). Then the peak memory: the process's
peak RSS (interpreter, file text, parsed config, verdicts: everything) and the peak of Python
allocations while parsing and validating. Then what `migops validate` spends on each shape:
reading the file and `fit_all` on each source, against the catalogue and on 8 x H100, in process, with
the number of validations per source and of reports per question (fit_all validates each source once
and asks the catalogue only where it can change a node's verdict); and the whole process of
`migops validate --gpu 0x233010DE` x 8 on the 6,000 distinct configs. Each shape runs in its own
interpreter, so peaks do not carry over. Times are the best of 3 runs, wall clock; the load average is printed before and after
(the machine is shared: figures from a busy machine are larger). Targets: < 1 s and < 200 MB for any
admissible file. Prints figures, never a verdict. `bench/mig_worst_case.py SHAPE...` runs only those shapes.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import _shapes  # noqa: E402

RUNS = 3
H100 = "0x233010DE"
MIXED = ("0x20B010DE", "0x233010DE", "0x20B710DE", "0x2BB510DE", "0x294110DE", "0x233510DE", "0x290110DE", "0x20B210DE")


def _best(fn) -> float:
    return _best_both(fn)[0]


def _best_both(fn) -> tuple[float, float]:
    """(best wall-clock time, best CPU time of this process) of RUNS runs: on a shared machine the CPU
    time shows what the wall clock spent waiting for a core."""
    wall = cpu = float("inf")
    for _ in range(RUNS):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu


def cli_check(text: str, node: list) -> object:
    """What `migops validate [--gpu ...]` does with the file, printing aside: read it, judge each source."""
    from migops.cli.mig import check_source
    from migops.mig.gcpause import paused_gc
    from migops.mig.sources import read_file

    with paused_gc():  # as cmd_validate runs the whole command
        contents = read_file(text.encode())
        return [check_source("bench.yaml", source, node, None, None) for source in contents.sources]


def count_validations(text: str, node: list) -> dict[str, int]:
    """Validations made and reports per question in one `cli_check` (counted apart from the timed runs)."""
    from migops.mig import validate as v

    counts = {"validations": 0, "node": 0, "catalogue": 0}
    init, report = v.Validation.__init__, v._Context.report

    def counting_init(self, *args, **kwargs) -> None:
        counts["validations"] += 1
        init(self, *args, **kwargs)

    def counting_report(self, name, entries):
        counts["node" if self.node is not None else "catalogue"] += 1
        return report(self, name, entries)

    v.Validation.__init__, v._Context.report = counting_init, counting_report
    try:
        cli_check(text, node)
    finally:
        v.Validation.__init__, v._Context.report = init, report
    return counts


def whole_process(text: str, runs: int = 5) -> dict[str, tuple[float, float, float]]:
    """(fastest, median wall time, load average at the end) of `migops validate --gpu 0x233010DE` x 8 on the
    file, as a whole process, `runs` times: with the bytecode cached (an installed migops: pip compiles
    every module it installs; one run first writes the cache) and as this shell runs it (with
    PYTHONDONTWRITEBYTECODE set, as here and in the image, a source checkout compiles every module it
    imports on every run), as bench/cli_startup.py measures start-up."""
    import statistics
    import tempfile

    migops = Path(sys.executable).parent / "migops"
    out = {}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f, tempfile.TemporaryDirectory() as prefix:
        f.write(text)
        f.flush()
        argv = [str(migops), "validate", *[a for _ in range(8) for a in ("--gpu", H100)], f.name]
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = prefix
        subprocess.run(argv, stdout=subprocess.DEVNULL, env=cached, check=False)
        for how, env in (("bytecode cached", cached), ("as this shell runs it", dict(os.environ))):
            walls = []
            for _ in range(runs):
                t0 = time.perf_counter()
                subprocess.run(argv, stdout=subprocess.DEVNULL, env=env, check=False)
                walls.append(time.perf_counter() - t0)
            out[how] = (min(walls), statistics.median(walls), os.getloadavg()[0])
    return out


def measure(shape: str) -> dict:
    """Run in a child interpreter: every figure for one shape."""
    from migops.mig.catalogue import catalogue
    from migops.mig.spec import parse_config
    from migops.mig.validate import validate

    cat = catalogue()
    text = _shapes.SHAPES[shape][0]()
    config = parse_config(text)
    h100 = [cat.by_device_id(H100)] * 8
    mixed = [cat.by_device_id(i) for i in MIXED]
    out = {
        "shape": shape,
        "kib": len(text.encode()) / 1024,
        "configs": len(config.configs),
        "parse": _best(lambda: parse_config(text)),
        "catalogue": _best(lambda: validate(config)),
        "node": _best(lambda: validate(config, node=h100)),
        "mixed": _best(lambda: validate(config, node=mixed, strategy="mixed")),
        # the verdict from the text, in one call per mode
        "total_catalogue": _best_both(lambda: validate(parse_config(text))),
        "total_node": _best_both(lambda: validate(parse_config(text), node=h100)),
        "total_mixed": _best_both(lambda: validate(parse_config(text), node=mixed, strategy="mixed")),
        "problems": sum(len(r.problems) for r in validate(config)),
        # `migops validate` in process: read + fit_all per source
        "cli_catalogue": _best_both(lambda: cli_check(text, [])),
        "cli_node": _best_both(lambda: cli_check(text, h100)),
        "counts_catalogue": count_validations(text, []),
        "counts_node": count_validations(text, h100),
    }
    if shape == "distinct":
        out["process_node"] = whole_process(text)
    del config
    out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before tracemalloc's own use
    # Peak Python allocations of parsing the file and judging it one way (the parsed config stays).
    tracemalloc.start()
    parsed = parse_config(text)
    for mode, node, strategy in (("catalogue", None, None), ("node", h100, None), ("mixed", mixed, "mixed")):
        tracemalloc.reset_peak()
        report = validate(parsed, node=node, strategy=strategy)
        out[f"traced_{mode}"] = tracemalloc.get_traced_memory()[1] / 2**20
        del report
    tracemalloc.stop()
    return out


def main() -> int:
    if sys.argv[1:2] == ["--shape"]:
        print(json.dumps(measure(sys.argv[2])))
        return 0
    print("MIG core worst cases: every shape is within the input bounds (1 MiB, 100,000 YAML nodes,")
    print("depth 32). Best of 3, wall clock; validate = every config of the file; total = parse + validate,")
    print("from the text, in one call. Targets: total < 1 s, peak < 200 MiB.")
    print(f"(load average {os.getloadavg()[0]:.2f} at the start: figures from a busy machine are larger)\n")
    chosen = sys.argv[1:] or list(_shapes.SHAPES)  # shape names to run (default: every one)
    for name in chosen:
        print(f"  {name:<9} {_shapes.SHAPES[name][1]}")
    results = []
    for name in chosen:
        done = subprocess.run([sys.executable, __file__, "--shape", name], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            results.append((name, done.stderr.strip().splitlines()[-1:]))
            continue
        results.append((name, json.loads(done.stdout)))
    print(f"\n  {'':<9} {'':>8} {'':>7} {'':>7} {'catalogue':^26} {'8 x H100':^26} {'8 models, mixed':^26}")
    print(
        f"  {'shape':<9} {'size':>8} {'configs':>7} {'parse':>7} " + f"{'validate':>8} {'total':>8} {'(cpu)':>8} " * 3
    )
    for name, r in results:
        if not isinstance(r, dict):
            print(f"  {name:<9} FAILED: {r}")
            continue
        line = f"  {name:<9} {r['kib']:>4.0f} KiB {r['configs']:>7} {r['parse']:>6.3f}s "
        for mode in ("catalogue", "node", "mixed"):
            wall, cpu = r[f"total_{mode}"]
            line += f"{r[mode]:>7.3f}s {wall:>7.3f}s {cpu:>7.3f}s "
        print(line)
    print(f"\n  {'':<9} {'':>8} {'peak':>8} {'traced peak: parse +':>29}")
    print(f"  {'shape':<9} {'problems':>8} {'RSS':>8} {'catalogue':>10} {'8 x H100':>9} {'8 models':>9}")
    for name, r in results:
        if isinstance(r, dict):
            print(
                f"  {name:<9} {r['problems']:>8} {r['rss_mib']:>4.0f} MiB {r['traced_catalogue']:>6.0f} MiB "
                f"{r['traced_node']:>5.0f} MiB {r['traced_mixed']:>5.0f} MiB"
            )
    print("\n  migops validate, in process: read the file + fit_all on each source (no start-up, no printing)")
    print(f"  {'':<9} {'catalogue':^26} {'8 x H100':^26}")
    print(f"  {'shape':<9} " + f"{'total':>8} {'(cpu)':>8} {'sources':>8} " * 2 + "reports: node + catalogue (configs)")
    for name, r in results:
        if not isinstance(r, dict):
            continue
        line = f"  {name:<9} "
        for mode in ("catalogue", "node"):
            wall, cpu = r[f"cli_{mode}"]
            line += f"{wall:>7.3f}s {cpu:>7.3f}s {r[f'counts_{mode}']['validations']:>8} "
        n = r["counts_node"]
        print(line + f"{n['node']:>6} + {n['catalogue']:<6} ({r['configs']})")
    for name, r in results:
        if isinstance(r, dict) and "process_node" in r:
            print(
                f"\n  migops validate --gpu {H100} x 8 on {name} ({r['configs']:,} configs, {r['kib']:.0f} KiB), "
                "whole process, 5 runs:"
            )
            for how, (fastest, median, load) in r["process_node"].items():
                print(f"    {how + ':':<23} fastest {fastest:.3f}s, median {median:.3f}s (load average {load:.2f})")
    print(f"\n(load average {os.getloadavg()[0]:.2f} at the end)")
    print("  total: parse + validate from the text in one call (one write's cost); (cpu): that call's CPU time.")
    print("  catalogue: against every model; 8 x H100: on a node of 8 x H100-SXM5-80GB; 8 models: on a node of")
    print("  8 different models under strategy mixed. problems: in catalogue mode. peak RSS: the whole process")
    print("  (interpreter, catalogue, file text, parsed config, the largest verdict). traced peak: Python")
    print("  allocations (MiB) while parsing the file and judging it in one of the three ways.")
    print("  sources: validations of the file per run (one per config source is the bound); reports: made on")
    print("  8 x H100, node + catalogue (a catalogue report only where it can change a node's verdict).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
