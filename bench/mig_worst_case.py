"""Worst-case benchmark of the MIG core (issue 11): large files that the input bounds admit.

For each shape of bench/_shapes.py (the files of issue 11 and worse ones) it prints the file's size,
the time to parse it, to validate every config against the catalogue and on an 8-GPU node (8 x H100,
and 8 different models), and the peak memory: the process's peak RSS (interpreter, file text,
parsed config, verdicts: everything) and the peak of Python allocations while parsing and validating.
Each shape runs in its own interpreter, so peaks do not carry over. Times are the best of 3 runs.
Targets: < 1 s and < 200 MB for any admissible file. Prints figures, never a verdict.
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
MIXED = ("0x20B010DE", "0x233010DE", "0x20B710DE", "0x2BB510DE", "0x294110DE", "0x233510DE", "0x290110DE",
         "0x20B210DE")


def _best(fn) -> float:
    best = float("inf")
    for _ in range(RUNS):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


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
        "problems": sum(len(r.problems) for r in validate(config)),
    }
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
    print("MIG core worst cases (issue 11): every shape is within the input bounds (1 MiB, 100,000 YAML nodes,")
    print("depth 32). Best of 3; validate = every config of the file. Targets: < 1 s, < 200 MiB.")
    print(f"(load average {os.getloadavg()[0]:.2f} at the start: figures from a busy machine are larger)\n")
    for name, (_, about) in _shapes.SHAPES.items():
        print(f"  {name:<9} {about}")
    print(f"\n  {'':<9} {'':>8} {'':>7} {'time':>8} {'':>10} {'':>8} {'':>9} {'':>9} {'peak':>9} "
          f"{'traced peak: parse +':>22}")
    print(f"  {'shape':<9} {'size':>8} {'configs':>7} {'parse':>8} {'catalogue':>10} {'8xH100':>8} "
          f"{'8 models':>9} {'problems':>9} {'RSS':>9} {'catalogue':>10} {'8xH100':>6} {'8 models':>8}")
    for name in _shapes.SHAPES:
        done = subprocess.run([sys.executable, __file__, "--shape", name], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            print(f"  {name:<9} FAILED: {done.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(done.stdout)
        print(f"  {name:<9} {r['kib']:>5.0f} KiB {r['configs']:>7} {r['parse']:>7.3f}s {r['catalogue']:>9.3f}s "
              f"{r['node']:>7.3f}s {r['mixed']:>8.3f}s {r['problems']:>9} {r['rss_mib']:>5.0f} MiB "
              f"{r['traced_catalogue']:>6.0f} MiB {r['traced_node']:>6.0f} {r['traced_mixed']:>8.0f}")
    print("\n  catalogue: against every model; 8xH100: on a node of 8 x H100-SXM5-80GB; 8 models: on a node of")
    print("  8 different models under strategy mixed. problems: in catalogue mode. peak RSS: the whole process")
    print("  (interpreter, catalogue, file text, parsed config, the largest verdict). traced peak: Python")
    print("  allocations (MiB) while parsing the file and judging it in one of the three ways.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
