"""The local images the real node runs: the pause (sandbox) image, and tiny busybox images for tests.

No registry is reachable, so every image is made here from files on this host and written as an
OCI archive (migops.local.ociimage) that `RealNode.load_image` imports into the node's containerd.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

from migops.local import ociimage

PAUSE_IMAGE = "migops.local/pause:1"
BUSYBOX = Path("/bin/busybox")  # Debian busybox-static (hack/host-packages.sh)
# Applets linked into /bin of a busybox image (its wget segfaults in a container: use nc).
BUSYBOX_APPLETS = (
    "sh",
    "cat",
    "echo",
    "env",
    "hostname",
    "httpd",
    "id",
    "ls",
    "nc",
    "printf",
    "sleep",
    "test",
    "true",
    "wc",
)


class ImageBuildError(RuntimeError):
    """An image could not be made (a tool is missing or failed); the message says which and why."""


def pause_archive(build_dir: Path) -> bytes:
    """Compile data/pause.c statically (gcc, libc6-dev) and wrap it as PAUSE_IMAGE."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ImageBuildError(
            "gcc is needed to build the pause image (apt-get install gcc libc6-dev; `make host-packages` installs it)"
        )
    build_dir.mkdir(parents=True, exist_ok=True)
    source = build_dir / "pause.c"
    source.write_text(resources.files("migops.local").joinpath("data/pause.c").read_text())
    binary = build_dir / "pause"
    proc = subprocess.run(
        [gcc, "-static", "-Os", "-s", "-o", str(binary), str(source)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise ImageBuildError(f"gcc -static pause.c failed (libc6-dev installed?): {proc.stderr.strip()[-2000:]}")
    return ociimage.archive(PAUSE_IMAGE, {"pause": ociimage.executable(binary)}, entrypoint=["/pause"])


def busybox_archive(
    name: str, *, files: Mapping[str, ociimage.File] | None = None, cmd: Sequence[str] = ("sh",), user: str = ""
) -> bytes:
    """Image `name`: a static busybox with BUSYBOX_APPLETS in /bin, plus `files`."""
    if not BUSYBOX.is_file():
        raise ImageBuildError(f"{BUSYBOX} not found (apt-get install busybox-static; `make host-packages`)")
    content: dict[str, ociimage.File] = {"bin/busybox": ociimage.executable(BUSYBOX)}
    content.update({f"bin/{a}": ociimage.File(link="busybox") for a in BUSYBOX_APPLETS})
    content.update(files or {})
    return ociimage.archive(name, content, cmd=cmd, user=user)
