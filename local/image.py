"""`migops local image`: the product image, built from the repository's own Dockerfile with no registry.

The Dockerfile's base is a build argument (PYTHON_IMAGE, default the public python:3.11-slim-bookworm).
No image registry is reachable here, so the base is made from Debian packages instead: mmdebstrap
bookworm (whose python3 is 3.11, as the public base) with git, openssh-client and gpgv already in it,
so the final stage's apt step finds them installed and skips (docs/deploy-image.md). The rootfs is
cached by the hash of what goes into it; `docker import` turns it into the local base image.

The builder is Debian's dockerd, started for the build with its data under the cache (never the
system's /var/lib/docker) and stopped after it: no bridge and no iptables rules (the RUN steps use the
host network, for pip), the legacy builder (BuildKit would fetch the `# syntax=` frontend from a
registry) and no pull (the base is local). The image is saved to a tar in the cache and imported into
the real node's containerd (`ctr -n k8s.io images import`), where pods run it with
imagePullPolicy Never.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from migops.local.nodeclean import _unmount_under  # the real node's sweep: the same job
from migops.local.process import ProcessRef, spawn, stop

Log = Callable[[str], None]
ROOT = Path(__file__).resolve().parents[1]  # the repository (editable installs and CI clones)
SUITE = "bookworm"
# What the final stage needs, and what the build stage runs (`python -m pip`, `python -m venv`).
BASE_PACKAGES = (
    "python3",
    "python3-venv",
    "python3-pip",
    "python-is-python3",
    "ca-certificates",
    "git",
    "openssh-client",
    "gpgv",
)
# Bumped when the recipe below changes in a way the package list does not show.
RECIPE = "1"
BASE_IMAGE = "migops-local-base"
IMAGE_NAME = "migops"
# Written into the base image: the build stage's pip uses the bundle the host trusts (below).
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
DOCKERD_CONFIG = {"bridge": "none", "iptables": False, "ip6tables": False, "ip-forward": False, "ip-masq": False}


class ImageError(RuntimeError):
    """A step of the image build failed; the message names it and carries its output's tail."""


def cache_dir() -> Path:
    """$MIGOPS_IMAGE_CACHE, else ~/.cache/migops/image (outside the repository, like the binaries)."""
    override = os.environ.get("MIGOPS_IMAGE_CACHE")
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "migops" / "image"
    return Path(override).expanduser().resolve() if override else base


def version(root: Path = ROOT) -> str:
    """The image tag: the package version (manifests/base tags `migops` with the same)."""
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def reference(root: Path = ROOT) -> str:
    return f"{IMAGE_NAME}:{version(root)}"


@dataclass(frozen=True)
class Built:
    reference: str  # what the manifests name (migops:0.1.0); containerd stores docker.io/library/...
    archive: Path  # `docker save` of it, what `ctr images import` reads
    size: int  # bytes, uncompressed, as `docker image inspect` counts
    base_seconds: float  # making the base rootfs (0 when cached)
    build_seconds: float


def _run(
    argv: Sequence[str], what: str, *, env: dict[str, str] | None = None, log: Log | None = None, timeout: float = 1800
) -> str:
    proc = subprocess.run(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if log:
        for line in proc.stdout.splitlines():
            log(line)
    if proc.returncode != 0:
        raise ImageError(f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n{proc.stdout[-4000:]}")
    return proc.stdout


def _tool(name: str, package: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin:/sbin")
    if not found:
        raise ImageError(f"{name} not found: install Debian's {package} (`make system-packages`)")
    return found


def base_key(packages: Sequence[str] = BASE_PACKAGES, ca_bundle: Path = CA_BUNDLE) -> str:
    digest = hashlib.sha256(f"{RECIPE}\n{SUITE}\n{' '.join(sorted(packages))}\n".encode())
    if ca_bundle.is_file():
        digest.update(ca_bundle.read_bytes())
    return digest.hexdigest()[:16]


def ensure_base_rootfs(cache: Path, log: Log) -> tuple[Path, float]:
    """The base rootfs tarball (built once per package list and CA bundle); seconds spent making it."""
    key = base_key()
    tar = cache / f"base-{SUITE}-{key}.tar"
    if tar.is_file():
        return tar, 0.0
    mmdebstrap = _tool("mmdebstrap", "mmdebstrap")
    began = time.monotonic()
    partial = tar.with_name(f"{tar.stem}.partial.tar")  # mmdebstrap picks its output format by the suffix
    log(f"making the base rootfs from Debian {SUITE} packages (once; ~1.5 min): {', '.join(BASE_PACKAGES)}")
    hooks = []
    if CA_BUNDLE.is_file():
        # The build stage's pip reaches the package index through whatever TLS the host trusts (a
        # proxy's CA, say): the base gets the host's bundle. Nothing else of the host goes in.
        hooks.append(f"--customize-hook=upload {CA_BUNDLE} {CA_BUNDLE}")
    _run(
        [
            mmdebstrap,
            "--variant=apt",
            "--aptopt=APT::Install-Recommends \"false\"",
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            "--dpkgopt=path-exclude=/usr/share/info/*",
            f"--include={','.join(BASE_PACKAGES)}",
            *hooks,
            SUITE,
            str(partial),
        ],
        "mmdebstrap",
    )
    partial.replace(tar)
    for old in cache.glob(f"base-{SUITE}-*"):
        if old != tar and old.is_file():
            old.unlink(missing_ok=True)
    return tar, time.monotonic() - began


# --------------------------------------------------------------------------- dockerd
@dataclass(frozen=True)
class Docker:
    """A dockerd of ours: its socket and the matching client."""

    client: str
    host: str  # unix:///...

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "DOCKER_HOST": self.host,
            "DOCKER_BUILDKIT": "0",
            "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin:/sbin",
        }

    def __call__(self, *args: str, what: str, log: Log | None = None) -> str:
        return _run([self.client, *args], what, env=self.env(), log=log)


@contextlib.contextmanager
def dockerd(cache: Path, log: Log) -> Iterator[Docker]:
    """Start Debian's dockerd on a socket under `cache`, data under `cache`; stop it (and the
    containerd it runs) on the way out."""
    import json

    binary = _tool("dockerd", "docker.io")
    # Debian's client, the daemon's own version: a newer one elsewhere on PATH may want BuildKit.
    client = "/usr/bin/docker" if os.access("/usr/bin/docker", os.X_OK) else _tool("docker", "docker.io")
    home = cache / "docker"
    run = home / "run"
    for d in (home, run):
        d.mkdir(parents=True, exist_ok=True)
    config = home / "daemon.json"
    config.write_text(json.dumps(DOCKERD_CONFIG))
    sock = run / "docker.sock"
    sock.unlink(missing_ok=True)
    argv = [
        binary,
        f"--config-file={config}",
        f"--data-root={home / 'data'}",
        f"--exec-root={run / 'exec'}",
        f"--pidfile={run / 'dockerd.pid'}",
        f"--host=unix://{sock}",
    ]
    # dockerd starts the containerd it finds on PATH: Debian's 1.6, its own version, first (`migops local
    # env` puts the real node's containerd 2.x first on a user's PATH).
    env = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin:" + os.environ.get("PATH", "")}
    popen, ref = spawn(argv, home / "dockerd.log", env=env)
    try:
        _wait_socket(sock, ref, home / "dockerd.log")
        yield Docker(client, f"unix://{sock}")
    finally:
        stop(ref, timeout=20, popen=popen)
        # dockerd bind-mounts its network namespace under the exec root and leaves it there; one stopped by
        # SIGKILL (past the timeout, on a busy machine) also leaves its data root's bind mount.
        left = _unmount_under(run) + _unmount_under(home / "data")
        if left:
            raise ImageError(f"dockerd left mounts behind: {', '.join(left)}")


def _wait_socket(sock: Path, ref: ProcessRef, logfile: Path, timeout: float = 60) -> None:
    from migops.local.process import is_alive

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(ref):
            raise ImageError(f"dockerd exited; its log:\n{logfile.read_text()[-3000:]}")
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sock))
            return
        time.sleep(0.2)
    raise ImageError(f"dockerd did not listen on {sock} within {timeout:.0f}s; log {logfile}")


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One build per cache at a time (two checkouts, or a test and a person)."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


# --------------------------------------------------------------------------- build
_SKIPPED = ("__pycache__", ".pyc", ".egg-info")  # .dockerignore's own exclusions (checked in context_key)


def context_key(root: Path = ROOT) -> str:
    """A hash of everything the image is built from: the Dockerfile, .dockerignore, every file (and link)
    under the paths its allowlist lets through, the base image's key. Equal keys, equal images: a build
    with the key of the saved archive is skipped (`make test` asks twice a session, e2e and helm).
    Over-inclusive on purpose -- a file hashed that Docker would not send only costs a rebuild; a
    .dockerignore of another shape than `*` plus `!path` lines plus the exclusions below is never cached."""
    ignore = (root / ".dockerignore").read_text()
    lines = [line.strip() for line in ignore.splitlines() if line.strip() and not line.startswith("#")]
    allowed = [line[1:].strip("/") for line in lines if line.startswith("!")]
    rest = [line for line in lines if not line.startswith("!")]
    if rest != ["*", "**/__pycache__", "**/*.pyc", "**/*.egg-info"] or any("*" in a for a in allowed):
        return ""  # not the allowlist this function reads: no cache
    digest = hashlib.sha256(f"{base_key()}\n".encode())
    for name in ("Dockerfile", ".dockerignore"):
        digest.update(f"{name}\n".encode() + (root / name).read_bytes())
    for top in sorted(allowed):
        paths = [root / top]
        while paths:
            path = paths.pop()
            relative = path.relative_to(root).as_posix()
            if path.name.endswith(_SKIPPED):
                continue
            if path.is_symlink():
                digest.update(f"link {relative} {os.readlink(path)}\n".encode())
            elif path.is_dir():
                paths.extend(sorted(path.iterdir(), reverse=True))
            elif path.is_file():
                digest.update(f"file {relative} {path.stat().st_mode & 0o111:o} {path.stat().st_size}\n".encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def _identity(path: Path) -> list[int]:
    """Which file this is: inode, size, modification time (ns)."""
    st = path.stat()
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def _paths(root: Path, cache: Path) -> tuple[Path, Path]:
    """The saved archive, and its stamp beside it ({"key", "size", "archive"}: what it was built from)."""
    archive = cache / f"{IMAGE_NAME}-{version(root)}.tar"
    return archive, archive.with_suffix(".key")


def saved(root: Path = ROOT, cache: Path | None = None) -> Built | None:
    """The saved archive when its stamp says it was built from this tree's context (context_key) and it
    is still that very file (a build by older code, which keeps no stamp, may have replaced it); else
    None. Call it under the cache's lock (build does)."""
    import json

    archive, stamp = _paths(root, cache or cache_dir())
    key = context_key(root)
    try:
        found = json.loads(stamp.read_text())
        if key and found["key"] == key and found["archive"] == _identity(archive):
            return Built(reference(root), archive, int(found["size"]), 0.0, 0.0)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def build(root: Path = ROOT, *, cache: Path | None = None, log: Log = lambda _: None) -> Built:
    """Build `migops:<version>` from root/Dockerfile on the local base; save it to a tar in the cache.
    Nothing is built when the saved archive is this tree's (`saved`; then both times are 0)."""
    import json

    cache = cache or cache_dir()
    ref = reference(root)
    archive, stamp = _paths(root, cache)
    with _locked(cache):
        found = saved(root, cache)
        if found is not None:
            log(f"{ref}: the saved image was built from this tree's context: not rebuilt")
            return found
        stamp.unlink(missing_ok=True)
        key = context_key(root)  # before the build reads the tree: an edit during it makes the next differ
        rootfs, base_seconds = ensure_base_rootfs(cache, log)
        base = f"{BASE_IMAGE}:{rootfs.stem.removeprefix('base-')}"
        began = time.monotonic()
        with dockerd(cache, log) as docker:
            have = docker("images", "--quiet", base, what="docker images").strip()
            if not have:
                log(f"importing the base rootfs as {base}")
                docker("import", "--change", "ENV LANG=C.UTF-8", str(rootfs), base, what="docker import")
            log(f"docker build {root} (Dockerfile; PYTHON_IMAGE={base})")
            stage = f"{BASE_IMAGE}:build-stage"
            before = {t: docker("images", "--quiet", t, what="docker images").strip() for t in (stage, ref)}
            common = ["build", "--pull=false", "--network=host", f"--build-arg=PYTHON_IMAGE={base}"]
            # The build stage tagged first: its layers stay referenced (the prune below keeps them), so
            # an unchanged context reuses the pip install of the last build.
            docker(*common, "--target=build", f"--tag={stage}", str(root), what="docker build (build stage)", log=log)
            docker(*common, f"--tag={ref}", str(root), what="docker build", log=log)
            size = int(docker("image", "inspect", "--format={{.Size}}", ref, what="docker image inspect").strip())
            partial = archive.with_suffix(".partial")
            docker("save", f"--output={partial}", ref, what="docker save")
            partial.replace(archive)
            if key:
                stamp.write_text(json.dumps({"key": key, "size": size, "archive": _identity(archive)}))
            # The images these tags named before, if a build replaced them: the cache stays the size of
            # one build. (Not `docker image prune`: on a large image store it can take minutes.)
            old = [
                i for t, i in before.items() if i and i != docker("images", "--quiet", t, what="docker images").strip()
            ]
            if old:
                with contextlib.suppress(ImageError):
                    docker("rmi", *old, what="docker rmi")
        return Built(ref, archive, size, base_seconds, time.monotonic() - began)
