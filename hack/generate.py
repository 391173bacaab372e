"""`make generate`: write the repository's generated files from their one source.

    python hack/generate.py            write every generated file
    python hack/generate.py --check    write nothing; exit 1 naming each file that differs from a fresh render

- the MigSync CRD, from the types in migops/api/migsync.py, into the chart's crds/ (the one file the
  chart installs and every manifest references);
- manifests/, from the chart and the values files in manifests/values/ (hack/manifests.py): needs
  helm, which hack/helm-binary.sh builds (or $MIGOPS_HELM names);
- the Argo CD ApplicationSet and the Flux objects that roll examples/fleet out wave by wave, from
  migops/gitops/fleet_rollout.py (what `migops fleet gitops` prints and the fleet tests run) into
  examples/fleet/gitops/.

Generated files are committed, so that `kubectl apply -k`, Flux and Argo CD read them from git; the
tests run `--check`, so a type changed without regenerating fails there.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD_FILE = ROOT / "charts" / "migops" / "crds" / "migsyncs.migops.io.yaml"
_CRD_HEADER = (
    "# The MigSync CRD, generated from the types in migops/api/migsync.py by `make generate`\n"
    "# (hack/generate.py): change them there, not here.\n"
)


def crd_text() -> str:
    from migops.api.migsync import crd

    return _CRD_HEADER + yaml.safe_dump(crd(), sort_keys=False, width=120)


def helm() -> Path:
    """$MIGOPS_HELM, else the helm hack/helm-binary.sh builds once into the cache."""
    if os.environ.get("MIGOPS_HELM"):
        return Path(os.environ["MIGOPS_HELM"])
    out = subprocess.run([str(ROOT / "hack" / "helm-binary.sh")], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"cannot build helm: {out.stderr.strip()[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


FLEET_EXAMPLE = ROOT / "examples" / "fleet"
PARTS = ("crd", "manifests", "fleet")


def fleet_objects_text(tool: str) -> str:
    from migops.cli.fleet_gitops import render

    return render(FLEET_EXAMPLE, tool)


def renders(parts: tuple[str, ...] = PARTS) -> dict[Path, Callable[[], str]]:
    """Each generated file and what makes its text."""
    out: dict[Path, Callable[[], str]] = {}
    if "crd" in parts:
        out[CRD_FILE] = crd_text
    if "fleet" in parts:
        for tool in ("argocd", "flux"):
            out[FLEET_EXAMPLE / "gitops" / f"{tool}.yaml"] = lambda tool=tool: fleet_objects_text(tool)
    if "manifests" in parts:
        sys.path.insert(0, str(ROOT / "hack"))
        import manifests

        for path, text in manifests.all_files(helm()).items():
            out[path] = lambda text=text: text
    return out


def stale_renders(wanted: set[Path]) -> set[Path]:
    """Generated files on disk that no render writes now (a template or a variant removed)."""
    sys.path.insert(0, str(ROOT / "hack"))
    import manifests

    return manifests.generated_on_disk() - wanted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare, write nothing; exit 1 when a file differs")
    parser.add_argument("parts", nargs="*", metavar="|".join(PARTS), help="what to render (default: all)")
    args = parser.parse_args(argv)
    parts = tuple(args.parts) or PARTS
    if set(parts) - set(PARTS):
        parser.error(f"unknown part(s): {', '.join(sorted(set(parts) - set(PARTS)))}")
    found = renders(parts)
    stale = []
    for path, render in found.items():
        text = render()
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.relative_to(ROOT))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if "manifests" in parts:
        for path in sorted(stale_renders(set(found))):
            if args.check:
                stale.append(path.relative_to(ROOT))
            else:
                path.unlink()
    for path in stale:
        print(f"{path}: differs from its source; run `make generate`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
