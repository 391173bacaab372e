"""`make generate`: write the repository's generated files from their one source.

    python hack/generate.py            write every generated file
    python hack/generate.py --check    write nothing; exit 1 naming each file that differs from a fresh render

- the MigSync CRD, from the types in migops/api/migsync.py, into the chart's crds/ (the file the
  chart installs) and the kustomize base.

Generated files are committed, so that `kubectl apply -k`, Flux and Argo CD read them from git; the
tests run `--check`, so a type changed without regenerating fails there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD_FILES = (
    ROOT / "charts" / "migops" / "crds" / "migsyncs.migops.io.yaml",
    ROOT / "manifests" / "base" / "reconciler" / "migsync-crd.yaml",
)
_CRD_HEADER = (
    "# The MigSync CRD, generated from the types in migops/api/migsync.py by `make generate`\n"
    "# (hack/generate.py): change them there, not here.\n"
)


def crd_text() -> str:
    from migops.api.migsync import crd

    return _CRD_HEADER + yaml.safe_dump(crd(), sort_keys=False, width=120)


def renders() -> dict[Path, Callable[[], str]]:
    """Each generated file and what makes its text."""
    return dict.fromkeys(CRD_FILES, crd_text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare, write nothing; exit 1 when a file differs")
    args = parser.parse_args(argv)
    stale = []
    for path, render in renders().items():
        text = render()
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.relative_to(ROOT))
        else:
            path.write_text(text)
    for path in stale:
        print(f"{path}: differs from its source; run `make generate`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
