"""The container image, proven without a container engine.

The Dockerfile's build stage is run here on the build context its .dockerignore leaves (conftest's
`image`): the wheel it installs is built and installed into a clean virtualenv, exactly the tree the
final stage copies to /opt/migops. Every program the Dockerfile and the manifests (base, every overlay
and component) start is then run from that tree, with the final stage's environment, and answers
--help; every migops command line in the manifests parses. The webhook's container command serving
for real, with the deployed RBAC, is in test_deploy_overlays.py.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from pathlib import Path

from deploy_helpers import DEPLOYABLE, ROOT, WITH_COMPONENTS, Dockerfile, Image, container_argv, containers, help_argv

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
ALL = ("base", *DEPLOYABLE, WITH_COMPONENTS)


def _python_version(base: str) -> tuple[int, int]:
    match = re.fullmatch(r"python:(\d+)\.(\d+)-slim(-\w+)?", base)
    assert match, f"base image {base}: expected python:X.Y-slim[-distro]"
    return int(match.group(1)), int(match.group(2))


def test_dockerfile_is_multi_stage_small_and_non_root(image: Image) -> None:
    df = image.dockerfile
    assert [s.name for s in df.stages] == ["build", None]
    # One interpreter for both stages: the virtualenv copied between them points at it.
    assert df.stages[0].base == df.final.base
    major, minor = _python_version(df.final.base)
    required = re.fullmatch(r">=(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert required and (major, minor) >= (int(required.group(1)), int(required.group(2)))
    uid, _, gid = (df.final.last("USER") or "").partition(":")
    assert uid.isdigit() and gid.isdigit() and uid != "0", "a numeric, non-root USER (runAsNonRoot can check it)"
    assert Dockerfile.exec_form(df.final.last("ENTRYPOINT")) == ["migops"]
    # The final stage adds the reconciler's tools and the install tree; no compilers, no pip, no context.
    (run,) = df.final.all("RUN")
    assert "--no-install-recommends" in run and "rm -rf /var/lib/apt/lists/*" in run
    assert "pip uninstall --yes setuptools pip" in df.stage("build").all("RUN")[-1]
    # The locked dependencies are installed before the context is copied: a code change reuses that layer.
    locked, wheel = df.stage("build").all("RUN")
    assert "-r requirements.lock" in locked and "/dist" not in locked and "/dist" in wheel
    assert df.final.env()["PYTHONDONTWRITEBYTECODE"] == "1" and df.final.env()["HOME"] == "/tmp"


def test_build_context_holds_the_package_and_nothing_else(image: Image) -> None:
    files = set(image.context_files)
    assert {"pyproject.toml", "README.md"} <= files
    folders = {f.split("/")[0] for f in files if "/" in f}
    linked = {p.name for p in (ROOT / "migops").iterdir() if p.is_symlink()}  # migops/mig -> ../mig, ...
    # Everything linked, except the local cluster harness (local/, migops.local): a developer's tool.
    assert "local" in linked and folders == {"migops"} | (linked - {"local"})
    assert not any(re.search(r"(^|/)(__pycache__|\.git|\.venv|tests)(/|$)", f) for f in files)


def test_gitops_tools_are_installed(image: Image) -> None:
    """Each executable the reconciler's git code runs comes with a package the final stage installs."""
    packages = {"git": "git", "ssh": "openssh-client", "ssh-keygen": "openssh-client", "gpgv": "gpgv"}
    (run,) = image.dockerfile.final.all("RUN")
    source = "\n".join(p.read_text() for p in (ROOT / "gitops").glob("*.py"))
    used = {tool for tool in packages if re.search(rf'["\[ ]{re.escape(tool)}["\] ]', source)}
    assert {"git", "ssh-keygen", "gpgv"} <= used
    for tool in used:
        assert re.search(rf"\b{re.escape(packages[tool])}\b", run), f"{tool}: {packages[tool]} is not installed"


def test_the_clean_install_is_the_wheel_alone(image: Image) -> None:
    out = image.run(
        [
            "python",
            "-c",
            "import migops.cli, migops.webhook.server, migops.agent.nvml, "
            "migops.reconciler.main, pynvml, gunicorn, sys; print(migops.cli.__file__); print(sys.prefix)\n"
            # the optional extra migops[suggest] (requirements.lock has it): spec.suggest works in the image
            "from migops.suggest.solve import require_solver; require_solver()",
        ]
    )
    assert out.returncode == 0, out.stderr
    module, prefix = out.stdout.split()
    assert Path(module).is_relative_to(image.venv) and Path(prefix) == image.venv
    assert not (image.venv / "bin" / "pip").exists(), "pip is removed from the image's virtualenv"
    # Bytecode was compiled at install time: nothing needs to be written at run time.
    site = next((image.venv / "lib").glob("python3.*/site-packages"))
    missing = [
        p for p in (site / "migops").rglob("*.py") if not list(p.parent.joinpath("__pycache__").glob(f"{p.stem}.*.pyc"))
    ]
    assert missing == []
    # The harness and the demo are not in the image; `migops local` says where to run it.
    assert not (site / "migops" / "local").exists()
    local = image.run(["migops", "local", "up"])
    assert local.returncode == 2 and "not installed here" in local.stderr, local.stderr


def _hops(link: Path) -> list[Path]:
    """Every path on the way from a symbolic link to what it ends at (not only the end: a virtualenv's
    python ends at the base interpreter whichever python it was made with)."""
    hops = [link]
    while hops[-1].is_symlink() and len(hops) < 40:
        hops.append(Path(os.path.abspath(os.path.join(hops[-1].parent, os.readlink(hops[-1])))))
    return hops


def test_the_cached_tree_does_not_depend_on_this_checkout(image: Image) -> None:
    """The built tree is cached per build context and shared by every checkout's sessions (conftest's
    `image`): nothing in it may lead back into the checkout that built it, or removing that clone breaks
    the next one's image tests ('python' not found)."""
    links = [p for p in image.venv.rglob("*") if p.is_symlink()]
    for link in links:
        assert not [h for h in _hops(link) if h.is_relative_to(ROOT)], _hops(link)
    python = _hops(image.venv / "bin" / "python")
    assert python[-1].is_file() and Path(os.path.realpath(python[-1])).is_relative_to(os.path.realpath(sys.base_prefix))
    assert str(ROOT) not in (image.venv / "pyvenv.cfg").read_text()


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_image_holds_exactly_the_locked_versions(image: Image) -> None:
    """What CI tested is what ships: every distribution in the image's virtualenv is a pin of
    requirements.lock at its version (or migops itself), and every pin is there; no pip, no setuptools."""
    locked = {
        _canonical(m.group(1)): m.group(2)
        for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", (ROOT / "requirements.lock").read_text(), re.M)
    }
    assert len(locked) > 20, "requirements.lock: expected pip-compile's name==version lines"
    out = image.run(
        [
            "python",
            "-c",
            "import importlib.metadata as m\nfor d in m.distributions(): print(d.metadata['Name'], d.version)",
        ]
    )
    assert out.returncode == 0, out.stderr
    installed = {_canonical(name): version for name, version in (line.split() for line in out.stdout.splitlines())}
    assert installed.pop("migops") == PYPROJECT["project"]["version"]
    assert installed == locked


def _entrypoints(image: Image, rendered) -> dict[tuple[str, ...], str]:
    """Every command line the image is started with: its own ENTRYPOINT + CMD, and each container's
    in every overlay; value: where it comes from."""
    df = image.dockerfile
    found = {tuple([*df.exec_form(df.final.last("ENTRYPOINT")), *df.exec_form(df.final.last("CMD"))]): "Dockerfile"}
    for overlay in ALL:
        for workload, container in containers(rendered(overlay)):
            name = container["image"].split("@")[0].rsplit(":", 1)[0]
            assert name == "migops", f"{overlay}: {workload['metadata']['name']} runs {container['image']}"
            found.setdefault(
                tuple(container_argv(container, df)), f"{overlay}: {workload['kind']}/{workload['metadata']['name']}"
            )
    return found


def test_every_entrypoint_answers_help(image: Image, rendered) -> None:
    entrypoints = _entrypoints(image, rendered)
    helps = {tuple(help_argv(list(argv))) for argv in entrypoints}
    # The four programs of the product, so a manifest that lost one fails here too.
    assert {
        ("gunicorn", "--help"),
        ("migops", "reconcile", "--help"),
        ("migops", "agent", "--help"),
        ("migops", "certs", "rotate", "--help"),
        ("migops", "--help"),
    } <= helps
    for argv in sorted(helps):
        out = image.run(list(argv))
        assert out.returncode == 0 and "usage" in out.stdout.lower(), f"{' '.join(argv)}: {out.stderr[-2000:]}"
        assert Path(image.env["PATH"].split(":")[0]) == image.venv / "bin"


def test_every_migops_command_line_parses(image: Image, rendered) -> None:
    """The manifests' flags exist and take the values given (argparse of the installed CLI)."""
    parse = "import sys; from migops.cli import build_parser; build_parser().parse_args(sys.argv[1:])"
    for argv, origin in _entrypoints(image, rendered).items():
        if argv[0] == "migops" and argv[1:] != ("--help",):
            out = image.run(["python", "-c", parse, *argv[1:]], env={"NODE_NAME": "node-1"})
            assert out.returncode == 0, f"{origin}: {' '.join(argv)}: {out.stderr}"


def test_gunicorn_config_of_the_webhook_loads(image: Image, tmp_path: Path) -> None:
    """The config module the webhook's container names is importable and gives migops's gthread worker
    (gunicorn's, without its idle-connection and close stalls) over TLS."""
    code = (
        "import migops.webhook.gunicorn_conf as c; print(c.worker_class, c.certfile, c.keyfile, c.bind[0], c.wsgi_app)"
    )
    out = image.run(["python", "-c", code], env={"MIGOPS_WEBHOOK_TMP": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "migops.webhook.worker.ThreadWorker",
        "/etc/migops/tls/tls.crt",
        "/etc/migops/tls/tls.key",
        "0.0.0.0:8443",
        "migops.webhook.wsgi:app",
    ]


def test_entrypoints_write_nothing_in_the_install_tree(image: Image) -> None:
    """Read-only root filesystem: starting the programs leaves the image's files as they were."""

    def snapshot() -> dict[str, tuple[int, float]]:
        return {str(p): (p.stat().st_size, p.stat().st_mtime) for p in image.venv.rglob("*") if p.is_file()}

    before = snapshot()
    for argv in (
        ["migops", "--help"],
        ["gunicorn", "--help"],
        ["migops", "agent", "--help"],
        [
            "python",
            "-c",
            "import pkgutil, migops; [__import__(m.name) for m in "
            "pkgutil.walk_packages(migops.__path__, 'migops.') if not m.name.endswith(('wsgi', 'gunicorn_conf', '__main__'))]",
        ],
    ):
        out = image.run(argv)
        assert out.returncode == 0, f"{argv}: {out.stderr[-2000:]}"
    assert snapshot() == before
