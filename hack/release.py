"""`make release`: every artifact of a release into dist/, all of one version, pyproject.toml's.

    migops-V-py3-none-any.whl             the CLI and every component (pip install / pipx install)
    migops-V.tar.gz                       the source distribution
    migops-image-V.oci.tar                the product image (the Dockerfile, built as `migops local image` builds
                                          it), an OCI image layout in a tar, named migops:V
    migops-image-V.oci.tar.sha256-digest  its manifest's digest: what a registry shows after a copy that keeps
                                          the manifest (skopeo, crane, oras), and what the chart's image.digest pins
    migops-V.tgz                          the Helm chart (`helm package`, CRDs in crds/), version and appVersion V
    migops-image-V.cdx.json               CycloneDX SBOM of the image's locked Python dependencies (cyclonedx-py)
    migops-V.notes.md                     the release notes: CHANGELOG.md's section for V
    SHA256SUMS                            `sha256sum -c SHA256SUMS` checks every file above

The wheel and the sdist come from `python -m build` with the build backend locked in requirements-dev.lock
(no isolated environment to download). The image is migops.local.image's build: dockerd from Debian with
its data under ~/.cache/migops/image, so an unchanged build context reuses the image the deploy tests
built; needs root, like `migops local image`. helm is hack/helm-binary.sh's. docs/releasing.md says how a
maintainer cuts a release with it.

    python hack/release.py [--dist DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from migops.local import image, ociimage

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# The sections of CHANGELOG.md: `## [0.1.0] — 2026-12-01` (a release) or `## [Unreleased]`.
SECTION = re.compile(r"^## \[([^\]]+)\](?: — (\d{4}-\d{2}-\d{2}))?[ \t]*$", re.M)


class ReleaseError(RuntimeError):
    """A step of the release failed; the message says which and why."""


def version(root: Path = ROOT) -> str:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def notes(changelog: str, release: str) -> str:
    """CHANGELOG.md's section for `release`, heading included; a missing or undated section is refused."""
    found = list(SECTION.finditer(changelog))
    for i, heading in enumerate(found):
        if heading.group(1) == release:
            if heading.group(2) is None:
                raise ReleaseError(f"CHANGELOG.md: `## [{release}]` has no date (`## [{release}] — YYYY-MM-DD`)")
            end = found[i + 1].start() if i + 1 < len(found) else len(changelog)
            return changelog[heading.start() : end].rstrip() + "\n"
    raise ReleaseError(
        f"CHANGELOG.md has no section `## [{release}] — YYYY-MM-DD`: move the Unreleased entries under it "
        "(docs/releasing.md)"
    )


def _run(argv: list[str], what: str, *, cwd: Path = ROOT) -> str:
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=1800, check=False)
    if out.returncode != 0:
        raise ReleaseError(
            f"{what} failed (exit {out.returncode}): {' '.join(argv)}\n{(out.stdout + out.stderr)[-4000:]}"
        )
    return out.stdout


def python_distributions(dist: Path) -> None:
    """Wheel and sdist, built from a copy of the tree: setuptools writes build/ and *.egg-info where it
    builds, and the checkout stays as it was."""
    with tempfile.TemporaryDirectory(prefix="migops-release-") as tmp:
        source = Path(tmp) / "migops"
        shutil.copytree(
            ROOT,
            source,
            symlinks=True,
            ignore=shutil.ignore_patterns(
                ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis"
            ),
        )
        _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)], "python -m build")


def image_archive(dist: Path, release: str, log: image.Log) -> Path:
    """The product image as an OCI archive, and its digest beside it."""
    built = image.build(ROOT, log=log)
    out = dist / f"migops-image-{release}.oci.tar"
    annotations = {
        "org.opencontainers.image.title": "migops",
        "org.opencontainers.image.version": release,
        "org.opencontainers.image.licenses": "Apache-2.0",
    }
    revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if revision.returncode == 0:
        annotations["org.opencontainers.image.revision"] = revision.stdout.strip()
    name = f"docker.io/library/{built.reference}"
    layers = image.cache_dir() / "oci-layers"  # beside the image: a code change compresses one layer again
    digest = ociimage.from_docker_archive(built.archive, out, name, annotations, layer_cache=layers)
    Path(f"{out}.sha256-digest").write_text(f"{digest}\n")
    return out


def chart(dist: Path, release: str) -> Path:
    helm = _run([str(ROOT / "hack" / "helm-binary.sh")], "hack/helm-binary.sh").strip().splitlines()[-1]
    chart_dir = ROOT / "charts" / "migops"
    _run([helm, "package", str(chart_dir), "--version", release, "--app-version", release, "-d", str(dist)], "helm")
    return dist / f"migops-{release}.tgz"


def sbom(dist: Path, release: str) -> Path:
    """The image's Python dependencies as requirements.lock pins them (with their hashes), the image as
    the root component."""
    out = dist / f"migops-image-{release}.cdx.json"
    argv = [str(BIN / "cyclonedx-py"), "requirements", str(ROOT / "requirements.lock")]
    argv += ["--pyproject", str(ROOT / "pyproject.toml"), "--mc-type", "application", "--output-reproducible"]
    _run([*argv, "--of", "JSON", "-o", str(out)], "cyclonedx-py")
    return out


def checksums(dist: Path) -> Path:
    """SHA256SUMS of every other file in dist/, in `sha256sum` format (two spaces, then the name)."""
    lines = []
    for path in sorted(p for p in dist.iterdir() if p.name != "SHA256SUMS"):
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        lines.append(f"{digest.hexdigest()}  {path.name}\n")
    out = dist / "SHA256SUMS"
    out.write_text("".join(lines))
    return out


def release(dist: Path, log: image.Log = print) -> list[Path]:
    """Build every artifact into `dist` (emptied first); the files, in order."""
    name = version()
    text = notes((ROOT / "CHANGELOG.md").read_text(), name)
    if dist.exists():
        shutil.rmtree(dist)
    dist.mkdir(parents=True)
    (dist / f"migops-{name}.notes.md").write_text(text)
    steps = [
        ("wheel and sdist", lambda: python_distributions(dist)),
        ("image", lambda: image_archive(dist, name, log)),
        ("chart", lambda: chart(dist, name)),
        ("SBOM", lambda: sbom(dist, name)),
    ]
    for what, step in steps:
        began = time.monotonic()
        step()
        log(f"release: {what}: {time.monotonic() - began:.1f}s")
    checksums(dist)
    return sorted(dist.iterdir())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/release.py", description=__doc__.split("\n")[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="the output directory (emptied first)")
    args = parser.parse_args(argv)
    try:
        files = release(args.dist.resolve())
    except (ReleaseError, image.ImageError) as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    for path in files:
        print(f"{path.stat().st_size:>12}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
