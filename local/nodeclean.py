"""Remove everything a real node leaves on the host, and list what is still there.

A kubelet and containerd spread well beyond their own directories: containerd shims and the
containers' processes outlive containerd; overlay, shm, netns and volume mounts; kube-proxy's and
the kubelet's `KUBE-*` iptables chains (global: one real node per machine, see realnode.host_lock);
the bridge and the pods' veths; kubepods cgroups in every hierarchy (cgroup v1 here); the
`/var/log/containers` symlinks the kubelet always writes; kernel settings the kubelet changes. The
real node is set up so that every path it can choose is under its node directory (containerd root,
state and netns mounts, kubelet root, pod logs, CNI address store); `sweep()` removes the rest by
what it is, in an order that works after a crash too, and `leftovers()` is the check a test (and
`migops local down`) runs afterwards.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from migops.local import nodenet
from migops.local.process import ProcessRef, find_by_argument, is_alive, stop

# One real node per machine, so one place for it, short enough for the unix sockets containerd and the
# kubelet make under it (at most 104 bytes a path).
NODE_DIR = Path("/var/lib/migops-node")
LOCK_PATH = Path("/run/migops-real-node.lock")
CGROUP_ROOT = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods"
CONTAINER_LOGS = Path("/var/log/containers")
HOSTS = Path("/etc/hosts")
CNI_STATE = (Path("/var/lib/cni"), Path("/run/cni"))  # libcni's result cache, default host-local store
CHAIN_PREFIX = "KUBE-"
# What the kubelet writes at start unless protectKernelDefaults (then it refuses to start instead).
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
SYSCTL_FILE = "sysctl-before.json"
# Host directories the node's programs create whatever they are told (shim sockets in
# /run/containerd/s, libcni's cache, the kubelet's device-plugin socket and its container log links):
# those that did not exist before the node started are removed with it, once empty.
HOST_DIRS = (
    Path("/run/containerd"),
    Path("/run/containerd/s"),
    Path("/var/lib/cni"),
    Path("/var/lib/cni/results"),
    Path("/var/lib/kubelet"),
    Path("/var/lib/kubelet/device-plugins"),
    CONTAINER_LOGS,
)
HOST_DIRS_FILE = "host-dirs-before.json"
DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
TASKS = Path("containerd/state/io.containerd.runtime.v2.task")  # under the node dir: <ns>/<id>/address
_MNT_DETACH = 2


# --------------------------------------------------------------------------- what the node owns
def node_arguments(node_dir: Path) -> tuple[str, ...]:
    """One argument each node process (containerd, its shims, kubelet, kube-proxy) is started with."""
    return (
        f"--config={node_dir / 'containerd.toml'}",
        str(node_dir / "containerd" / "containerd.sock"),
        f"--root-dir={node_dir / 'kubelet'}",
        f"--config={node_dir / 'kube-proxy.yaml'}",
    )


def save_sysctls(node_dir: Path) -> None:
    """Record the kernel settings the kubelet will change, once (a restart must not record its own)."""
    path = node_dir / SYSCTL_FILE
    if not path.exists():
        path.write_text(json.dumps({k: _read_sysctl(k) for k in KUBELET_SYSCTLS}))


def save_host_dirs(node_dir: Path) -> None:
    """Record which of HOST_DIRS exist before the node starts."""
    path = node_dir / HOST_DIRS_FILE
    if not path.exists():
        path.write_text(json.dumps({str(d): d.is_dir() for d in HOST_DIRS}))


def _read_sysctl(key: str) -> str | None:
    try:
        return Path("/proc/sys", key).read_text().strip()
    except OSError:
        return None


# --------------------------------------------------------------------------- sweep
def sweep(node_dir: Path, kube_proxy: Path | None, owner: Path) -> list[str]:
    """Remove every trace of the real node whose directory is `node_dir`, started for `owner` (the
    control plane's workdir); return what could not be removed. Nothing at all when the machine's lock
    says another owner's node runs (the node directory and everything else are machine-wide).

    Order: processes (nothing may recreate what follows), mounts, iptables, the bridge, cgroups,
    log symlinks and CNI files, kernel settings, and last the directory itself, only when nothing is
    mounted under it any more (a delete must never descend into a mount).
    """
    problems: list[str] = []
    other = another_owner_holds_the_machine(owner)
    if other:
        return [f"left alone: {other}"]
    _kill_node_processes(node_dir)
    problems += _unmount_under(node_dir)
    problems += _clean_iptables(kube_proxy)
    try:
        nodenet.delete()
    except nodenet.NetworkError as exc:
        problems.append(str(exc))
    problems += _remove_cgroups()
    _remove_log_links(node_dir)
    _remove_cni_state()
    _remove_sockets(node_dir)
    _remove_created_host_dirs(node_dir)
    _restore_sysctls(node_dir)
    if node_dir.exists():
        if _mounts_under(node_dir):
            problems.append(f"{node_dir} kept: still mounted under it")
        else:
            _rmtree(node_dir)
    return problems


def lock_line(owner: Path) -> str:
    """What the lock file says about its holder (the test in another_owner_holds_the_machine)."""
    return f"owner {owner}, started by pid {os.getpid()}"


def last_owner_is(owner: Path) -> bool:
    """Whether the machine's real node was last started for `owner` (the lock file keeps its line after
    release): `migops local down` after an `up` that died before recording its state."""
    try:
        return LOCK_PATH.read_text().startswith(f"owner {owner},")
    except OSError:
        return False


def another_owner_holds_the_machine(owner: Path) -> str | None:
    """The holder's description when the machine's real-node lock is held for another owner (then the
    node directory, its processes and everything machine-wide are that owner's)."""
    import fcntl

    if not LOCK_PATH.exists():
        return None
    fd = os.open(LOCK_PATH, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None  # nobody holds it
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip()
        return None if holder.startswith(f"owner {owner},") else f"another real node runs on this host ({holder})"
    finally:
        os.close(fd)


def _kill_node_processes(node_dir: Path) -> None:
    refs: list[ProcessRef] = []
    for arg in node_arguments(node_dir):
        refs += [r for r in find_by_argument(arg) if r not in refs]
    for ref in refs:  # containerd, kubelet, kube-proxy (their groups) and the shims (own sessions)
        try:
            stop(ref, timeout=5.0)
        except RuntimeError:
            pass
    # The containers themselves: every process in a kubepods cgroup, in any hierarchy.
    for _ in range(50):
        pids = _kubepods_pids()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def _kubepods_dirs() -> list[Path]:
    """Every kubepods cgroup directory (deepest first), across the v1 hierarchies (or the v2 tree)."""
    found: list[Path] = []
    roots = [p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink()] if CGROUP_ROOT.is_dir() else []
    for root in [CGROUP_ROOT, *roots]:
        top = root / KUBEPODS
        if top.is_dir():
            found += sorted((Path(d) for d, _, _ in os.walk(top)), key=lambda p: len(p.parts), reverse=True)
    return found


def _kubepods_pids() -> set[int]:
    pids: set[int] = set()
    for d in _kubepods_dirs():
        try:
            pids |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
        except OSError:
            continue
    pids.discard(os.getpid())
    return pids


def _remove_cgroups() -> list[str]:
    left = []
    for d in _kubepods_dirs():
        for attempt in range(20):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:  # EBUSY while a dying process leaves
                if attempt == 19:
                    left.append(f"cgroup {d}: {exc.strerror}")
                time.sleep(0.1)
    return left


def _mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path`, deepest first (from /proc/self/mountinfo)."""
    prefix = str(path.resolve()) if path.exists() else str(path)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")  # \040 for spaces
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def _unmount_under(path: Path) -> list[str]:
    libc = ctypes.CDLL(None, use_errno=True)
    for _ in range(5):  # a mount can hide another at the same point
        points = _mounts_under(path)
        if not points:
            return []
        for point in points:
            if libc.umount2(point.encode(), 0) != 0:
                libc.umount2(point.encode(), _MNT_DETACH)
    return [f"still mounted: {p}" for p in _mounts_under(path)]


def _iptables(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, "-w", "5", *args], capture_output=True, text=True, check=False)


def kube_chains() -> dict[tuple[str, str], list[str]]:
    """`KUBE-*` chains by (iptables binary, table)."""
    found: dict[tuple[str, str], list[str]] = {}
    for binary in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle", "raw"):
            proc = _iptables(binary, "-t", table, "-S")
            chains = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("-N " + CHAIN_PREFIX)]
            if chains:
                found[(binary, table)] = chains
    return found


def _clean_iptables(kube_proxy: Path | None) -> list[str]:
    if kube_proxy is not None and kube_proxy.exists():
        subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, check=False, timeout=60)
    # What --cleanup leaves (the kubelet's own chains, and everything after a kube-proxy never started):
    # first the jumps into KUBE-* chains from anywhere, then the chains.
    for (binary, table), chains in kube_chains().items():
        rules = _iptables(binary, "-t", table, "-S").stdout.splitlines()
        for rule in rules:
            words = rule.split()
            if (
                words[:1] == ["-A"]
                and any(w.startswith(CHAIN_PREFIX) for w in words[2:])
                and not words[1].startswith(CHAIN_PREFIX)
            ):
                _iptables(binary, "-t", table, "-D", *words[1:])
        for chain in chains:
            _iptables(binary, "-t", table, "-F", chain)
        for chain in chains:
            _iptables(binary, "-t", table, "-X", chain)
    left = kube_chains()
    return [f"{b} -t {t}: chains {', '.join(c)} remain" for (b, t), c in left.items()]


def _remove_log_links(node_dir: Path) -> None:
    if not CONTAINER_LOGS.is_dir():
        return
    for link in CONTAINER_LOGS.iterdir():
        if link.is_symlink() and os.readlink(link).startswith(str(node_dir) + "/"):
            link.unlink()


def _remove_cni_state() -> None:
    for base in CNI_STATE:
        for path in _cni_files(base):
            path.unlink(missing_ok=True)


def _cni_files(base: Path) -> list[Path]:
    """libcni's cached results and host-local leases of our network (named after it), and the loopback
    results of the same sandboxes (a containerd without `use_internal_loopback` writes those)."""
    if not base.is_dir():
        return []
    ours = [p for p in base.rglob(f"{nodenet.CNI_NETWORK}-*") if p.is_file()]
    ids = {p.name.split("-")[1] for p in ours}
    loopback = [p for p in base.rglob("cni-loopback-*-lo") if p.is_file() and p.name.split("-")[2] in ids]
    return ours + loopback + [p for p in (base / "networks" / nodenet.CNI_NETWORK,) if p.exists()]


def _remove_sockets(node_dir: Path) -> None:
    """The shims' sockets (in /run/containerd/s whatever containerd's state directory: each task's bundle
    says which) and the kubelet's device-plugin socket; a shim killed by SIGKILL leaves its socket."""
    tasks = node_dir / TASKS
    if tasks.is_dir():
        for address in tasks.glob("*/*/address"):
            try:
                sock = address.read_text().strip().removeprefix("unix://")
            except OSError:
                continue
            if sock.startswith("/run/containerd/s/"):
                for p in (Path(sock), Path(sock + ".debug")):
                    p.unlink(missing_ok=True)
    DEVICE_PLUGIN_SOCKET.unlink(missing_ok=True)


def _remove_created_host_dirs(node_dir: Path) -> None:
    try:
        existed = json.loads((node_dir / HOST_DIRS_FILE).read_text())
    except (OSError, ValueError):
        return
    for d in sorted(HOST_DIRS, key=lambda p: len(p.parts), reverse=True):
        if not existed.get(str(d), True):
            try:
                d.rmdir()
            except OSError:
                pass  # absent, or someone else's files are in it now


def _restore_sysctls(node_dir: Path) -> None:
    try:
        before = json.loads((node_dir / SYSCTL_FILE).read_text())
    except (OSError, ValueError):
        return
    for key, value in before.items():
        if value is not None and _read_sysctl(key) != value:
            try:
                Path("/proc/sys", key).write_text(value + "\n")
            except OSError:
                pass


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------- the check
def leftovers(node_dir: Path, node_name: str) -> list[str]:
    """Anything of a real node still on the host: processes, mounts, netns, iptables chains, links,
    cgroups, files. Empty after a clean `sweep()`."""
    found: list[str] = []
    procs = {r.pid for arg in node_arguments(node_dir) for r in find_by_argument(arg) if is_alive(r)}
    found += [f"process {pid}" for pid in sorted(procs | _kubepods_pids())]
    found += [f"mount {p}" for p in _mounts_under(node_dir)]
    found += [f"netns {n}" for n in _netns_of(node_dir)]
    found += [f"iptables {b} -t {t} {c}" for (b, t), cs in kube_chains().items() for c in cs]
    found += [f"link {name}" for name in _links() if name == nodenet.BRIDGE or name.startswith("veth")]
    found += [f"cgroup {d}" for d in _kubepods_dirs()]
    if CONTAINER_LOGS.is_dir():
        found += [
            f"symlink {p}"
            for p in CONTAINER_LOGS.iterdir()
            if p.is_symlink() and os.readlink(p).startswith(str(node_dir) + "/")
        ]
    found += [f"file {p}" for base in CNI_STATE for p in _cni_files(base)]
    if DEVICE_PLUGIN_SOCKET.exists():
        found.append(f"file {DEVICE_PLUGIN_SOCKET}")
    if HOSTS.exists():
        found += [f"hosts line {line!r}" for line in HOSTS.read_text().splitlines() if node_name in line.split()]
    if node_dir.exists():
        found.append(f"directory {node_dir}")
    return found


def _links() -> Iterable[str]:
    return [p.name for p in Path("/sys/class/net").iterdir()]


def _netns_of(node_dir: Path) -> list[str]:
    """Network namespace mounts of ours: under the node directory (containerd puts them there) and any
    `cni-*` one in /run/netns (where containerd would put them otherwise)."""
    out = [p for p in _mounts_under(node_dir) if "/netns/" in p]
    run = Path("/run/netns")
    if run.is_dir():
        out += [str(p) for p in run.iterdir() if p.name.startswith("cni-")]
    return out
