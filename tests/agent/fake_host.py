"""A fake host for the systemd path: `chroot` and `systemctl` executables on PATH.

`chroot ROOT CMD...` records ROOT and runs CMD here; `systemctl` keeps each unit's properties in a
file under $FAKE_SYSTEMD and logs every call, so the agent's real subprocess path is exercised.
"""

from __future__ import annotations

import os
from pathlib import Path

CHROOT = """#!/bin/sh
echo "$1" >> "$FAKE_SYSTEMD/chroot.log"
shift
exec "$@"
"""

SYSTEMCTL = r"""#!/bin/sh
echo "$*" >> "$FAKE_SYSTEMD/calls.log"
dir="$FAKE_SYSTEMD/units"
case "$1" in
  show)
    unit="$4"
    if [ -f "$dir/$unit" ]; then cat "$dir/$unit"; else printf 'LoadState=not-found\nActiveState=inactive\n'; fi ;;
  stop)
    unit="$3"
    [ -f "$FAKE_SYSTEMD/fail-stop" ] && { echo "Failed to stop $unit" >&2; exit 1; }
    sed -i 's/^ActiveState=.*/ActiveState=inactive/' "$dir/$unit" ;;
  start)
    unit="$4"
    sed -i 's/^ActiveState=.*/ActiveState=active/' "$dir/$unit" ;;
  reboot)
    touch "$FAKE_SYSTEMD/rebooted" ;;
esac
"""


def make_host(root: Path, units: dict[str, str]) -> dict[str, str]:
    """Write the fake executables and units (name -> ActiveState, or 'oneshot' for an inactive
    oneshot); return the environment that puts them first on PATH."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    (root / "units").mkdir()
    for name, text in (("chroot", CHROOT), ("systemctl", SYSTEMCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    for unit, active in units.items():
        kind = "oneshot" if active == "oneshot" else "simple"
        state = "inactive" if active == "oneshot" else active
        (root / "units" / unit).write_text(
            f"LoadState=loaded\nActiveState={state}\nUnitFileState=enabled\nType={kind}\n"
        )
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SYSTEMD": str(root)}


def unit_state(root: Path, unit: str) -> str:
    for line in (root / "units" / unit).read_text().splitlines():
        if line.startswith("ActiveState="):
            return line.split("=", 1)[1]
    return ""


def calls(root: Path) -> list[str]:
    path = root / "calls.log"
    return path.read_text().splitlines() if path.exists() else []
