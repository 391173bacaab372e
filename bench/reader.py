"""Benchmark of the reader: mig-parted's reading of a config file, manifest streams, the largest inputs
the bounds let through, and the conformance figure against NVIDIA's recorded verdicts.

Prints figures; no pass/fail. Run directly or through bench/run.py (`make bench`).
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

from migops.mig.problems import MigError
from migops.mig.sources import read_file
from migops.mig.spec import parse_config

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = (ROOT / "examples" / "nvidia-default-config.yaml").read_text()
CONFORMANCE = ROOT / "tests" / "mig" / "conformance"


def median_ms(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e6


def row(label: str, value: str, target: str = "(none)") -> None:
    print(f"  {label:<70} {value:>12}   {target}")


def refused(text: str) -> str:
    try:
        parse_config(text)
    except MigError as exc:
        return exc.problems[0].rule
    return "accepted"


def main() -> int:
    print(f"Reader benchmark (Python {sys.version.split()[0]})\n")
    print(f"  {'':<70} {'median':>12}   target")
    row(
        "parse NVIDIA default config (81 configs, 610 lines)",
        f"{median_ms(lambda: parse_config(DEFAULT), 50):.2f} ms",
        "no regression (PyYAML-based reader: ~5 ms)",
    )
    configmap = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: default-mig-parted-config, namespace: gpu-operator}\n"
        "data:\n  config.yaml: |\n" + "".join("    " + line + "\n" for line in DEFAULT.splitlines())
    )
    stream = "---\n".join(
        [
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: gpu-operator}\n",
            configmap,
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 1}\n",
        ]
    )
    row(
        "read a manifest stream holding it as a ConfigMap (3 documents)",
        f"{median_ms(lambda: read_file(stream), 30):.2f} ms",
    )
    big = (
        "version: v1\nmig-configs:\n  c:\n    - mig-enabled: false\n      devices: [" + ",".join(["0"] * 99_000) + "]\n"
    )
    row(
        f"a 99,000-item devices list ({len(big) // 1024} KiB, within the 100,000-node bound)",
        f"{median_ms(lambda: parse_config(big), 5):.1f} ms",
    )
    import yaml

    row(
        "  the same with PyYAML's C loader, for scale",
        f"{median_ms(lambda: yaml.load(big, Loader=yaml.CSafeLoader), 5):.1f} ms",
    )
    huge = (
        "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n"
        "        1g.10gb: 9223372036854775807\n"
    )
    row(
        "parse a count of 2^63-1 (reading only; judging it is the validator's)",
        f"{median_ms(lambda: parse_config(huge), 200) * 1000:.0f} µs",
    )
    over = (
        "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n"
        "        1g.10gb: 99999999999999999999\n"
    )
    row(f"a count beyond int64 ({refused(over)})", f"{median_ms(lambda: refused(over), 200) * 1000:.0f} µs")
    laughs = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
    )
    row(f"billion laughs ({refused(laughs)})", f"{median_ms(lambda: refused(laughs), 20):.2f} ms")
    deep = "[" * 500_000 + "]" * 500_000
    row(f"1 MB of nested brackets ({refused(deep)})", f"{median_ms(lambda: refused(deep), 5):.2f} ms")
    print()
    spec = importlib.util.spec_from_file_location("conformance_generate", CONFORMANCE / "generate.py")
    generate = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(generate)  # type: ignore[union-attr]
    corpus = json.loads((CONFORMANCE / "corpus.json").read_text(encoding="utf-8"))
    recorded = json.loads((CONFORMANCE / "verdicts.json").read_text(encoding="utf-8"))
    same = 0
    t0 = time.perf_counter()
    for entry in corpus:
        v = recorded["verdicts"][entry["id"]]
        contents = read_file(generate.input_bytes(entry))
        (source,) = contents.sources
        if contents.manifests:
            continue  # read as a Kubernetes manifest, which mig-parted does not do
        accepted = source.config is not None
        if (
            not v.get("varies")
            and accepted == v["accepted"]
            and (not accepted or sorted(source.config.names()) == v["names"])
        ):
            same += 1
    took = time.perf_counter() - t0
    meta = recorded["meta"]
    print(
        f"Conformance: {same}/{len(corpus)} inputs ({same / len(corpus):.1%}) get mig-parted {meta['version']}'s "
        f"verdict and config names (recorded {meta['recorded']}); the rest are migops's documented bounds "
        f"(docs/config-rules.md). Reading all {len(corpus)} took {took:.2f} s."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
