"""What the deploy tests read: the Dockerfile, .dockerignore, and the manifests as kustomize renders them.

Small readers, no container engine: the Dockerfile is parsed into stages and instructions (enough for
this repository's file, which the tests keep that simple), .dockerignore is matched with Docker's rules
for the pattern forms it uses, and each overlay is rendered by the shared `kubectl kustomize`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from migops.local.binaries import locate

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
OVERLAYS = MANIFESTS / "overlays"
# Every overlay a user can deploy, and one test overlay that adds every component to gpu-operator.
DEPLOYABLE = ("gpu-operator", "gpu-operator-mig-manager", "gpu-operator-webhook-only", "kind")
WITH_COMPONENTS = "gpu-operator+components"
COMPONENTS = ("host-driver", "nvml-host-library", "git-ssh")
CERT_MANAGER = "gpu-operator+cert-manager"  # render-checked only: cert-manager cannot run here
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job", "CronJob")


# ------------------------------------------------------------------------------------------ Dockerfile
@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str | None:
        found = self.all(keyword)
        return found[-1] if found else None

    def env(self) -> dict[str, str]:
        """ENV KEY=VALUE ... (the one form used here), later lines winning."""
        out: dict[str, str] = {}
        for args in self.all("ENV"):
            for word in shlex.split(args):
                key, sep, value = word.partition("=")
                assert sep, f"ENV {args!r}: only the KEY=VALUE form is read here"
                out[key] = value
        return out


@dataclass
class Dockerfile:
    args: dict[str, str]  # ARG defaults declared before the first FROM
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def stage(self, name: str) -> Stage:
        (found,) = [s for s in self.stages if s.name == name]
        return found

    @staticmethod
    def exec_form(args: str | None) -> list[str] | None:
        """ENTRYPOINT/CMD in exec (JSON) form; the shell form is refused (no shell as PID 1)."""
        if args is None:
            return None
        value = yaml.safe_load(args)
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"not exec form: {args}"
        return value


def read_dockerfile(path: Path = ROOT / "Dockerfile") -> Dockerfile:
    lines: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif not stages:
            assert keyword == "ARG", f"{keyword} before the first FROM"
            key, _, default = rest.partition("=")
            args[key] = default
        else:
            stages[-1].instructions.append((keyword, rest))
    return Dockerfile(args, stages)


# --------------------------------------------------------------------------------------- .dockerignore
def dockerignore_patterns(path: Path = ROOT / ".dockerignore") -> list[str]:
    patterns = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        # Character classes and `?` would need more of Docker's matcher than this one has.
        assert "[" not in line and "?" not in line, f".dockerignore: {line!r}"
        patterns.append(line.rstrip("/"))
    return patterns


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


def ignored(relative: str, patterns: list[str]) -> bool:
    """Docker's rule (moby/patternmatcher): patterns in order, the last that matches the path or a
    folder above it decides; a `!` pattern puts back what an earlier one left out."""
    parts = relative.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    matched = False
    for pattern in patterns:
        exclusion = pattern.startswith("!")
        regex = _pattern_regex(pattern.lstrip("!").lstrip("/"))
        if exclusion != matched:
            continue
        if any(regex.fullmatch(c) for c in candidates):
            matched = not exclusion
    return matched


def build_context(dest: Path, root: Path = ROOT) -> list[str]:
    """Copy what `docker build .` would send (the .dockerignore applied); return the relative paths."""
    patterns = dockerignore_patterns(root / ".dockerignore")
    exceptions = [p[1:].lstrip("/") for p in patterns if p.startswith("!")]
    copied = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder).relative_to(root).as_posix()
        prefix = "" if here == "." else here + "/"
        # Skip folders left out whole (no exception reaches inside them): .git, .venv, ...
        dirs[:] = sorted(
            d
            for d in dirs
            if not ignored(prefix + d, patterns) or any(e.startswith(prefix + d + "/") for e in exceptions)
        )
        # A symbolic link is sent as a link (migops/mig -> ../mig, ...), as Docker sends it.
        for name in [d for d in dirs if (Path(folder) / d).is_symlink()]:
            dirs.remove(name)
            (dest / prefix).mkdir(parents=True, exist_ok=True)
            (dest / (prefix + name)).symlink_to(os.readlink(Path(folder) / name))
            copied.append(prefix + name)
        for name in sorted(files):
            relative = prefix + name
            if ignored(relative, patterns):
                continue
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(folder) / name, target)
            copied.append(relative)
    return copied


# ------------------------------------------------------------------------------- the image's build
BUILD_DIST, INSTALL_DIR = "/dist", "/opt/migops"
# PATH in the python base images before the Dockerfile's ENV prepends to it: nothing of the host's
# virtualenvs, so an entrypoint found at all is the clean install's.
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Image:
    dockerfile: Dockerfile
    context: Path
    context_files: tuple[str, ...]
    venv: Path  # what the image has at /opt/migops
    env: dict[str, str]  # the final stage's ENV, paths moved like venv, for running its entrypoints
    workdir: Path  # an empty working directory (none is set in the image)

    def run(
        self, argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 120, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            env={**self.env, **(env or {})},
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **kwargs,
        )


def _run_step(command: str, top: Path, cwd: Path) -> None:
    """One RUN line of the build stage, its image paths moved under `top`. `python`: the base
    interpreter of the one running the tests (a clean virtualenv from it, none of this one's
    site-packages), linked from top/bin. Not this checkout's virtualenv: the virtualenv built here links
    to the `python` it was made with, and the cached tree outlives the checkout that built it."""
    bindir = top / "bin"
    if not bindir.is_dir():
        bindir.mkdir()
        (bindir / "python").symlink_to(os.path.realpath(sys._base_executable))
    for image_path, here in {BUILD_DIST: str(top / "dist"), INSTALL_DIR: str(top / "opt" / "migops")}.items():
        command = command.replace(image_path, here)
    out = subprocess.run(
        ["sh", "-c", command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"},
        check=False,
    )
    assert out.returncode == 0, f"RUN {command}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"


def build_image(top: Path, scratch: Path | None = None, layers: Path | None = None) -> Image:
    """Run the Dockerfile's build stage here (see conftest's `image`), under `top`; the final stage's
    HOME and an empty working directory under `scratch` (default `top`). With `layers`, the first RUN
    line's result (the locked virtualenv) comes from that cache, as Docker's layer cache gives it."""
    dockerfile = read_dockerfile()
    context = top / "context"
    files = build_context(context)
    build = dockerfile.stage("build")
    # The lock first (its own layer: a code change does not reinstall it), then the whole context; the RUN
    # lines after the first run in the whole context, which holds the lock too.
    assert build.all("WORKDIR") == ["/src"] and build.all("COPY") == ["requirements.lock .", ". ."], (
        "the build stage copies the lock, then the context, to /src"
    )
    first, *rest = build.all("RUN")
    if layers is None:
        _run_step(first, top, context)
    else:
        _relocated(_lock_layer(first, layers), top)
    for command in rest:
        _run_step(command, top, context)
    venv = top / "opt" / "migops"
    assert dockerfile.final.all("COPY") == [f"--from=build {INSTALL_DIR} {INSTALL_DIR}"]
    return _image(dockerfile, context, tuple(files), venv, scratch or top)


def _image(dockerfile: Dockerfile, context: Path, files: tuple[str, ...], venv: Path, scratch: Path) -> Image:
    home = scratch / "home"
    home.mkdir()
    env = {"PATH": IMAGE_PATH}
    for key, value in dockerfile.final.env().items():
        value = value.replace("$PATH", env["PATH"]).replace(INSTALL_DIR, str(venv))
        env[key] = str(home) if key == "HOME" else value
    workdir = scratch / "work"
    workdir.mkdir()
    return Image(dockerfile, context, files, venv, env, workdir)


def _lock_layer(command: str, store: Path) -> Path:
    """The first RUN line's tree (bin/python and the virtualenv of requirements.lock under opt/), run
    where only the lock is (the Dockerfile copies it alone before that line), cached under `store` by
    the line, the lock and this interpreter: a change to migops' code does not reinstall the hundred-odd
    locked wheels (~40 CPU s, over 3 minutes beside the other tiers). Built under an exclusive lock;
    other keys' layers that no session is copying are removed."""
    import fcntl
    import hashlib
    import inspect

    lock_text = (ROOT / "requirements.lock").read_bytes()
    digest = hashlib.sha256(f"{command}\n{sys.version}\n{sys.base_prefix}\n".encode() + lock_text)
    digest.update(inspect.getsource(_run_step).encode())
    key = "layer-" + digest.hexdigest()[:20]
    top, done = store / key, store / f"{key}.done"
    with (store / f"{key}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            shutil.rmtree(top, ignore_errors=True)
            (top / "src").mkdir(parents=True)
            shutil.copy2(ROOT / "requirements.lock", top / "src" / "requirements.lock")
            _run_step(command, top, top / "src")
            done.touch()
    for other in store.glob("layer-*.lock"):
        if other.stem != key:
            with other.open("a") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # being built or copied
                (store / f"{other.stem}.done").unlink(missing_ok=True)
                shutil.rmtree(store / other.stem, ignore_errors=True)
    return top


def _relocated(layer: Path, top: Path) -> None:
    """A copy of the layer's virtualenv at top/opt/migops, as if made there: a virtualenv names its own
    path (pyvenv.cfg, the scripts' #! lines, activate) and links its interpreter by absolute path; those
    are rewritten, everything else is copied as it is (with its times, so the compiled bytecode stays
    valid). A copy, never links: the next RUN line changes the tree."""
    shutil.copytree(layer / "bin", top / "bin", symlinks=True)
    venv = top / "opt" / "migops"
    shutil.copytree(layer / "opt" / "migops", venv, symlinks=True)
    old, new = str(layer).encode(), str(top).encode()
    for path in [venv / "pyvenv.cfg", *(venv / "bin").iterdir()]:
        if path.is_symlink():
            target = os.readlink(path)
            if target.startswith(str(layer)):
                path.unlink()
                path.symlink_to(str(top) + target[len(str(layer)) :])
        elif path.is_file():
            text = path.read_bytes()
            if old in text:
                path.write_bytes(text.replace(old, new))
    # Nothing else in the tree may name the layer: the tests would run from it unawares.
    for folder, _, names in os.walk(venv):
        for name in names:
            path = Path(folder) / name
            if not path.is_symlink() and not name.endswith(".pyc"):
                assert old not in path.read_bytes(), f"{path} names the layer it was copied from"


def cached_image(scratch: Path) -> Image:
    """build_image's tree, built once per build context: under the image cache
    (~/.cache/migops/image/build-stage/<key>), the key covering what `migops local image` keys the image
    by (migops.local.image.context_key: the Dockerfile, .dockerignore, every file it lets through), this
    interpreter and build_image's own code. HOME and the working directory are fresh in `scratch`.

    Several sessions share a tree (a shared lock, held until the process exits); the first builds it
    under an exclusive one. A virtualenv cannot move, so it is built in place and marked complete last;
    an incomplete one is rebuilt. Trees of other keys that no session holds are removed, so the cache
    keeps the trees in use and the newest."""
    import fcntl
    import hashlib
    import inspect
    import json

    from migops.local import image as local_image

    context_key = local_image.context_key(ROOT)
    if not context_key:  # a .dockerignore context_key does not read: no cache
        return build_image(scratch / "tree", scratch)
    digest = hashlib.sha256(f"{context_key}\n{sys.version}\n{sys.base_prefix}\n".encode())
    for helper in (build_image, build_context, _run_step, _lock_layer, _relocated):
        digest.update(inspect.getsource(helper).encode())
    key = digest.hexdigest()[:20]
    store = local_image.cache_dir() / "build-stage"
    store.mkdir(parents=True, exist_ok=True)
    top, done = store / key, store / f"{key}.json"
    lock = (store / f"{key}.lock").open("a")  # kept open (and locked) for the session: see _HELD
    _HELD.append(lock)
    fcntl.flock(lock, fcntl.LOCK_EX)
    built: Image | None = None
    try:
        if not done.is_file():
            shutil.rmtree(top, ignore_errors=True)
            top.mkdir()
            built = build_image(top, scratch, layers=store)
            done.write_text(json.dumps(list(built.context_files)))
        files = tuple(json.loads(done.read_text()))
    finally:
        fcntl.flock(lock, fcntl.LOCK_SH)  # downgraded: others may use it, nobody may remove it
    for other in store.glob("*.lock"):
        if other.stem == key or other.stem.startswith("layer-"):  # layers: `_lock_layer` keeps them
            continue
        with other.open("a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # in use by another session
            # The lock file stays (a session may have it open): only the tree and its mark go.
            (store / f"{other.stem}.json").unlink(missing_ok=True)
            shutil.rmtree(store / other.stem, ignore_errors=True)
    return built or _image(read_dockerfile(), top / "context", files, top / "opt" / "migops", scratch)


_HELD: list[Any] = []  # the cached trees' lock files this process holds (released when it exits)


# ------------------------------------------------------------------------------------------ manifests
def kubectl() -> Path:
    return locate().kubectl


def kustomize(path: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(kubectl()), "kustomize", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, f"kubectl kustomize {path}: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def render(name: str, scratch: Path) -> list[dict[str, Any]]:
    """An overlay by name: base, one under manifests/overlays/, WITH_COMPONENTS (gpu-operator plus every
    component) or "monitoring" (that component alone). The last two are built in a copy of manifests/,
    so the repository is never written to."""
    if name == "base":
        return kustomize(MANIFESTS / "base")
    if name not in (WITH_COMPONENTS, "monitoring", CERT_MANAGER):
        return kustomize(OVERLAYS / name)
    copy = scratch / "manifests"
    if not copy.exists():
        shutil.copytree(MANIFESTS, copy)
        shutil.copytree(ROOT / "charts" / "migops" / "crds", scratch / "charts" / "migops" / "crds")
    overlay = copy / "overlays" / f"test-{name.replace('+', '-')}"
    overlay.mkdir(exist_ok=True)
    body: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    if name == WITH_COMPONENTS:
        body |= {"resources": ["../gpu-operator"], "components": [f"../components/{c}" for c in COMPONENTS]}
    elif name == CERT_MANAGER:
        body |= {"resources": ["../gpu-operator"], "components": ["../components/cert-manager"]}
    else:
        body |= {"components": ["../components/monitoring"]}
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(body))
    return kustomize(overlay)


def pod_template(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]
    if doc["kind"] in WORKLOADS:
        return doc["spec"]["template"]
    return None


def containers(docs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, container) for every container and init container of every pod template."""
    for doc in docs:
        template = pod_template(doc)
        if template is None:
            continue
        spec = template["spec"]
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            yield doc, c


def container_argv(container: dict[str, Any], image: Dockerfile) -> list[str]:
    """What the container runs: its command, else the image's ENTRYPOINT; then its args, else CMD."""
    entrypoint = container.get("command") or Dockerfile.exec_form(image.final.last("ENTRYPOINT")) or []
    if "command" in container:
        rest = container.get("args", [])
    else:
        rest = container.get("args") or Dockerfile.exec_form(image.final.last("CMD")) or []
    return [*entrypoint, *rest]


def help_argv(argv: list[str]) -> list[str]:
    """The same program and subcommand with --help: `migops certs rotate --secret ...` -> `migops
    certs rotate --help`; `gunicorn -c ...` -> `gunicorn --help`."""
    words = [argv[0]]
    for word in argv[1:]:
        if word.startswith("-"):
            break
        words.append(word)
    return [*words, "--help"]


def by_key(docs: list[dict[str, Any]]) -> dict[tuple[str, str | None, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs}
