"""`make demo`: what migops does today, run on the examples under examples/.

Until the webhook, reconciler and agent land, the demo shows the MIG core the way a user meets it:
validating NVIDIA's default config and a custom ConfigMap, refusing common mistakes with the rule they
break, and drawing where each MIG instance will sit on the GPU.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from migops.cli import main as migops

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
H100 = "0x233010DE"

STEPS: list[tuple[str, list[str], int]] = [
    ("The GPU catalogue (first rows)", ["gpus"], 0),
    ("NVIDIA's default config, checked against every known GPU model",
     ["validate", "examples/nvidia-default-config.yaml"], 0),
    ("all-balanced on an H100 node under the mixed strategy: valid, and what GFD will advertise",
     ["validate", "--gpu", H100, "--strategy", "mixed", "-c", "all-balanced", "examples/nvidia-default-config.yaml"], 0),
    ("The same config under the single strategy: refused before any GPU client is paused",
     ["validate", "--gpu", H100, "--strategy", "single", "-c", "all-balanced", "examples/nvidia-default-config.yaml"], 1),
    ("Where each instance goes",
     ["plan", "--gpu", H100, "-c", "all-balanced", "examples/nvidia-default-config.yaml"], 0),
    ("A custom ConfigMap for 8 x H100, one geometry per GPU group",
     ["validate", "--strategy", "mixed", *["--gpu", H100] * 8, "examples/custom-mig-config.yaml"], 0),
    ("Its layout, GPU by GPU",
     ["plan", "--gpu", H100, "--gpu", H100, "--gpu", H100, "--gpu", H100, "--gpu", H100, "--gpu", H100,
      "--gpu", H100, "--gpu", H100, "-c", "h100-inference", "examples/custom-mig-config.yaml"], 0),
    ("Common mistakes, each refused with its path and rule",
     ["validate", "--gpu", H100, "examples/invalid-configs.yaml"], 1),
]


def main() -> int:
    import os

    os.chdir(EXAMPLES.parent)
    failures = 0
    for title, args, expected in STEPS:
        print(f"\n== {title}\n$ migops {shlex.join(args)}", flush=True)
        if args == ["gpus"]:
            import contextlib
            import io

            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                rc = migops(args)
            print("\n".join(buf.getvalue().splitlines()[:8]))
            print("... (migops gpus lists all of them)")
        else:
            rc = migops(args)
        sys.stdout.flush()
        if rc != expected:
            print(f"!! expected exit {expected}, got {rc}")
            failures += 1
        else:
            print(f"(exit {rc}, as expected)")
    print(f"\ndemo finished: {len(STEPS) - failures}/{len(STEPS)} steps behaved as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
