"""One real node in the local cluster: containerd + kubelet + kube-proxy as host processes, running pods.

kind cannot run on this kind of machine (its node containers need `--privileged`, which is refused),
so the node is a host kubelet beside the local control plane (ControlPlane with `node_address`, plus
kube-controller-manager). Every constraint of the machine and the setting that answers it is in
docs/development/local-control-plane.md ("The real node"); in short:

- cgroup v1 host: kubelet `failCgroupV1: false`, cgroupfs driver, runc `SystemdCgroup = false`;
- CAP_SYS_RESOURCE missing: containerd `restrict_oom_score_adj`;
- no registry: the sandbox image is a static C pause program imported with `ctr images import`;
- network: migops.local.nodenet (one bridge, one /32 node address, no default route in pods);
- one real node per machine (kube-proxy's KUBE-* chains are global): `host_lock()`.

Every path the node writes that can be chosen is under its node directory (one per machine,
/var/lib/migops-node: the unix sockets under it must stay under 104 bytes); migops.local.nodeclean
removes the rest. The processes are adopted by the ControlPlane, so its watchdog, stop() and detach() cover them
like the servers.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client as k8s
from kubernetes.client import ApiClient

from migops import certs
from migops.local import images, nodeclean, nodenet
from migops.local.binaries import NODE_NAMES, Binaries
from migops.local.controlplane import SERVICE_CLUSTER_IP_RANGE, ControlPlane

NODE_NAME = "migops-node"
LOCK_PATH = nodeclean.LOCK_PATH
NODE_USER = f"system:node:{NODE_NAME}"
NODE_GROUPS = ("system:nodes",)
PROXY_USER = "system:kube-proxy"  # bound to system:node-proxier by the bootstrap policy
KUBELET_HEALTHZ_PORT = 10248
KUBELET_PORT = 10250
NAMESPACE = "k8s.io"  # containerd's namespace for CRI (kubelet-visible) images and containers
RUNC = ("/usr/sbin/runc", "/usr/bin/runc")
HOST_TOOLS = ("iptables", "ip6tables", "conntrack", "ip")


class RealNodeError(RuntimeError):
    """The real node cannot start (what is missing, what failed); carries the log tail where there is one."""


class RealNodeBusy(RealNodeError):
    """Another real node runs on this host."""


@dataclass(frozen=True)
class Layout:
    """The paths of one real node, all under `root`."""

    root: Path

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def containerd_dir(self) -> Path:
        return self.root / "containerd"

    @property
    def socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def proxy_config(self) -> Path:
        return self.root / "kube-proxy.yaml"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def gpu_dir(self) -> Path:
        """The simulated GPUs' state (`gpus.json`), for an agent running on this node (host or pod)."""
        return self.root / "gpus"

    @property
    def logs(self) -> Path:
        return self.root / "logs"


def host_lock(owner: Path) -> int:
    """Take the machine's real-node lock (flock on LOCK_PATH) for `owner` (the control plane's workdir)
    without waiting; its file descriptor.

    The descriptor is handed to containerd, so the lock is held as long as the node's runtime (and
    the shims it starts) live, past the `migops local up` that took it.
    """
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise RealNodeBusy(
            f"another real node runs on this host ({holder}); only one at a time, because kube-proxy's "
            f"KUBE-* iptables chains are global. Stop it first (`migops local down` with its MIGOPS_HOME, "
            f"or end the test session holding it); the lock is {LOCK_PATH}"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, (nodeclean.lock_line(owner) + "\n").encode(), 0)
    return fd


class RealNode:
    """The node `NODE_NAME` in `node_dir`, for the control plane in `owner`. prepare() before the control
    plane starts (the API server binds the node address), join(plane) after; cleanup() removes it."""

    def __init__(
        self, binaries: Binaries, owner: Path, node_dir: Path = nodeclean.NODE_DIR, *, ready_timeout: float = 120.0
    ) -> None:
        self.binaries = binaries
        self.owner = Path(owner).resolve()
        self.layout = Layout(Path(node_dir).resolve())
        self.network = nodenet.Network(service_cidr=SERVICE_CLUSTER_IP_RANGE)
        self.name = NODE_NAME
        self.ready_timeout = ready_timeout
        self._lock_fd: int | None = None
        self.ready_seconds: float | None = None

    @property
    def address(self) -> str:
        return self.network.node_ip

    # ------------------------------------------------------------------ lifecycle
    def prepare(self) -> None:
        """Check the host, take the machine's lock, clear what a crashed node left, create the network."""
        self._check_host()
        self._lock_fd = host_lock(self.owner)
        try:
            leftover = nodeclean.sweep(self.layout.root, self.binaries.kube_proxy, self.owner)
            if leftover:
                raise RealNodeError("a previous real node left things that cannot be removed: " + "; ".join(leftover))
            for d in (
                self.layout.containerd_dir,
                self.layout.kubelet_dir,
                self.layout.cni_conf_dir,
                self.layout.gpu_dir,
                self.layout.logs,
            ):
                d.mkdir(parents=True, exist_ok=True)
            nodeclean.save_host_dirs(self.layout.root)
            nodenet.create(self.network)
        except BaseException:
            self.release_lock()
            raise

    def join(self, plane: ControlPlane) -> None:
        """Start containerd (and load the pause image), the kubelet and kube-proxy; return once the Node is
        Ready and schedulable. Each process is adopted by `plane`."""
        if plane.node_address != self.address:
            raise RealNodeError(
                f"the control plane must serve on the node address {self.address} (ControlPlane(node_address=...))"
            )
        began = time.monotonic()
        self._start_containerd(plane)
        self.release_lock()  # containerd holds it now
        self.load_image(images.pause_archive(self.layout.root / "build"))
        self._start_kubelet(plane)
        self._start_kube_proxy(plane)
        with plane.api_client() as api:
            self._wait_ready(plane, api)
            remove_not_ready_taint(api, self.name)
        self.ready_seconds = time.monotonic() - began

    def cleanup(self) -> list[str]:
        """After the processes are stopped: remove everything else (nodeclean.sweep); what remains."""
        problems = nodeclean.sweep(self.layout.root, self.binaries.kube_proxy, self.owner)
        self.release_lock()
        return problems

    def release_lock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)

    # ------------------------------------------------------------------ images
    def load_image(self, archive: bytes | Path) -> str:
        """Import an image archive (OCI or `docker save` tar, bytes or a file) into the node's containerd,
        where the kubelet finds it (pods use `imagePullPolicy: Never` or `IfNotPresent`). ctr's output."""
        path = archive if isinstance(archive, Path) else None
        if path is None:
            self.layout.root.joinpath("build").mkdir(parents=True, exist_ok=True)
            path = self.layout.root / "build" / f"import-{time.monotonic_ns()}.tar"
            path.write_bytes(archive)  # type: ignore[arg-type]
        try:
            proc = subprocess.run(
                [
                    str(self.binaries.ctr),
                    "--address",
                    str(self.layout.socket),
                    "-n",
                    NAMESPACE,
                    "images",
                    "import",
                    "--local",
                    str(path),
                ],
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
            )
        finally:
            if not isinstance(archive, Path):
                path.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise RealNodeError(f"ctr images import failed: {(proc.stderr or proc.stdout).strip()[-2000:]}")
        return proc.stdout

    def ctr(self, *args: str) -> str:
        """Run `ctr` against the node's containerd (namespace k8s.io); its stdout."""
        proc = subprocess.run(
            [str(self.binaries.ctr), "--address", str(self.layout.socket), "-n", NAMESPACE, *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if proc.returncode != 0:
            raise RealNodeError(f"ctr {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    # ------------------------------------------------------------------ internals
    def _check_host(self) -> None:
        if os.geteuid() != 0:
            raise RealNodeError("the real node needs root (containerd, mounts, iptables, a bridge)")
        missing = self.binaries.missing(NODE_NAMES)
        if missing:
            raise RealNodeError(
                f"missing {', '.join(missing)} in {self.binaries.directory}: run hack/k8s-binaries.sh "
                "(`make k8s-binaries`)"
            )
        tools = [t for t in HOST_TOOLS if shutil.which(t) is None]
        if not any(Path(r).exists() for r in RUNC):
            tools.append("runc")
        if not (nodenet.CNI_BIN_DIR / "bridge").exists():
            tools.append(f"CNI plugins in {nodenet.CNI_BIN_DIR}")
        if tools:
            raise RealNodeError(f"missing {', '.join(tools)}: `make host-packages` installs them")

    def _launch(
        self,
        plane: ControlPlane,
        name: str,
        argv: list[str],
        *,
        pass_fds: tuple[int, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        from migops.local.process import spawn

        log = plane.logs / f"{name}.log"
        popen, ref = spawn(argv, log, pass_fds=pass_fds, env=env)
        plane.adopt(name, popen, ref)

    def _wait_for(self, plane: ControlPlane, name: str, what: str, check, timeout: float = 60.0) -> None:  # noqa: ANN001
        from migops.local.process import is_alive

        deadline = time.monotonic() + timeout
        ref = plane.processes[name]
        while time.monotonic() < deadline:
            if not is_alive(ref):
                raise RealNodeError(
                    f"{name} exited during startup; last log lines:\n{_tail(plane.logs / (name + '.log'))}"
                )
            if check():
                return
            time.sleep(0.1)
        raise RealNodeError(
            f"{name}: {what} not after {timeout:.0f}s; last log lines:\n{_tail(plane.logs / (name + '.log'))}"
        )

    def _start_containerd(self, plane: ControlPlane) -> None:
        lay = self.layout
        runc = next(r for r in RUNC if Path(r).exists())
        lay.cni_conf_dir.joinpath("10-migops.conflist").write_text(
            nodenet.cni_conflist(self.network, lay.root / "cni" / "ipam")
        )
        lay.containerd_config.write_text(containerd_config(lay, runc))
        # Our shim first on PATH: Debian's containerd (pulled in by docker.io) ships a 1.6 one.
        env = {
            **os.environ,
            "PATH": f"{self.binaries.directory}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}",
        }
        assert self._lock_fd is not None
        self._launch(
            plane,
            "containerd",
            [str(self.binaries.containerd), f"--config={lay.containerd_config}"],
            pass_fds=(self._lock_fd,),
            env=env,
        )

        def answers() -> bool:
            return (
                lay.socket.exists()
                and subprocess.run(
                    [str(self.binaries.ctr), "--address", str(lay.socket), "version"],
                    capture_output=True,
                    check=False,
                    timeout=10,
                ).returncode
                == 0
            )

        self._wait_for(plane, "containerd", "answering on its socket", answers)

    def _start_kubelet(self, plane: ControlPlane) -> None:
        lay = self.layout
        pki = lay.root / "pki"
        certs.issue_serving(plane.serving_ca(), NODE_USER, dns_names=(self.name,), ip_addresses=(self.address,)).write(
            pki / "kubelet.crt", pki / "kubelet.key"
        )
        identity = plane.kubeconfig_for(NODE_USER, NODE_GROUPS)
        lay.kubelet_config.write_text(
            json.dumps(kubelet_config(lay, plane.pki / "client-ca.crt", self.address), indent=2)
        )
        nodeclean.save_sysctls(lay.root)
        self._launch(
            plane,
            "kubelet",
            [
                str(self.binaries.kubelet),
                f"--config={lay.kubelet_config}",
                f"--kubeconfig={identity}",
                f"--root-dir={lay.kubelet_dir}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.address}",
                "--v=1",
            ],
        )

    def _start_kube_proxy(self, plane: ControlPlane) -> None:
        lay = self.layout
        identity = plane.kubeconfig_for(PROXY_USER)
        lay.proxy_config.write_text(json.dumps(kube_proxy_config(identity, self.name, self.network), indent=2))
        self._launch(plane, "kube-proxy", [str(self.binaries.kube_proxy), f"--config={lay.proxy_config}", "--v=1"])

    def _wait_ready(self, plane: ControlPlane, api: ApiClient) -> None:
        core = k8s.CoreV1Api(api)

        def ready() -> bool:
            try:
                node = core.read_node(self.name)
            except k8s.ApiException:
                return False
            return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))

        self._wait_for(plane, "kubelet", f"Node {self.name} Ready", ready, timeout=self.ready_timeout)


def remove_not_ready_taint(api: ApiClient, name: str) -> None:
    """Lift the `node.kubernetes.io/not-ready` taint the API server puts on every new Node: the
    node-lifecycle controller would once the node is Ready, and it does not run here (CONTROLLERS)."""
    from migops.local.cluster import NOT_READY_TAINT

    core = k8s.CoreV1Api(api)
    taints = core.read_node(name).spec.taints or []
    kept = [t.to_dict() for t in taints if t.key != NOT_READY_TAINT]
    if len(kept) != len(taints):
        core.patch_node(
            name,
            [{"op": "replace", "path": "/spec/taints", "value": kept}],
            _content_type="application/json-patch+json",
        )


# --------------------------------------------------------------------------- configuration files
def containerd_config(lay: Layout, runc: str) -> str:
    """containerd 2.x (config version 3): every state path under the node directory, CRI for the kubelet."""
    c = lay.containerd_dir
    cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
    return f"""version = 3
root = '{c / "root"}'
state = '{c / "state"}'
temp = '{c / "tmp"}'
imports = []
# Plugins that would reach outside the node directory (NRI's socket in /var/run/nri) or need what this
# machine lacks.
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.snapshotter.v1.btrfs',
                    'io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.devmapper',
                    'io.containerd.snapshotter.v1.blockfile', 'io.containerd.tracing.processor.v1.otlp',
                    'io.containerd.internal.v1.tracing']

[grpc]
  address = '{lay.socket}'

[ttrpc]
  address = '{lay.socket}.ttrpc'

[debug]
  address = ''

[metrics]
  address = ''

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = '{c / "opt"}'

  [plugins.'io.containerd.image-verifier.v1.bindir']
    bin_dir = '{c / "image-verifier"}'

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{images.PAUSE_IMAGE}'

  [{cri_runtime}]
    # runc cannot write oom_score_adj without CAP_SYS_RESOURCE (a host's bounding set may lack it).
    restrict_oom_score_adj = true
    # Pod network namespaces under the state directory, not /run/netns.
    netns_mounts_under_state_dir = true
    cdi_spec_dirs = []
    [{cri_runtime}.containerd]
      default_runtime_name = 'runc'
      [{cri_runtime}.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [{cri_runtime}.containerd.runtimes.runc.options]
          BinaryName = '{runc}'
          Root = '{c / "runc"}'
          SystemdCgroup = false
    [{cri_runtime}.cni]
      bin_dirs = ['{nodenet.CNI_BIN_DIR}']
      conf_dir = '{lay.cni_conf_dir}'
      max_conf_num = 1
      # containerd brings the pod's loopback up itself: no `cni-loopback` network and its cache files.
      use_internal_loopback = true

  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
"""


def kubelet_config(lay: Layout, client_ca: Path, address: str) -> dict:
    """KubeletConfiguration: cgroup v1 + cgroupfs, x509 + webhook auth, logs and state under the node dir."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "tlsCertFile": str(lay.root / "pki" / "kubelet.crt"),
        "tlsPrivateKeyFile": str(lay.root / "pki" / "kubelet.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{lay.socket}",
        # cgroup v1 host (kubelet 1.37 refuses it unless told), no systemd to drive cgroups.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "podLogsDir": str(lay.root / "pod-logs"),
        # No cluster DNS and no host resolver for pods (nothing to resolve, nowhere to send it).
        "resolvConf": "",
        "clusterDomain": "cluster.local",
        "failSwapOn": False,
        # Never evict or garbage-collect the locally built images for the host's disk use.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "1%",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "maxPods": 110,
        "serializeImagePulls": False,
    }


def kube_proxy_config(kubeconfig_path: Path, name: str, net: nodenet.Network) -> dict:
    """KubeProxyConfiguration: iptables mode; no host-wide conntrack or route_localnet settings."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig_path)},
        "hostnameOverride": name,
        "bindAddress": net.node_ip,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "mode": "iptables",
        "clusterCIDR": net.pod_cidr,
        "nodePortAddresses": [f"{net.node_ip}/32"],
        # Pods share one bridge with the node address: masquerade Service traffic so replies come back
        # through the host and are un-NATed.
        "iptables": {"masqueradeAll": True, "localhostNodePorts": False},
        # 0: leave the host's conntrack table size and timeouts as they are.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


# --------------------------------------------------------------------------- control plane + node
def start_cluster(
    binaries: Binaries, workdir: Path, *, watchdog: bool = True, scheduler: bool = True
) -> tuple[ControlPlane, RealNode]:
    """A control plane serving pods (in `workdir`), kube-controller-manager, kube-scheduler and the real
    node (in `workdir/node`), Ready. On failure everything started is stopped and swept."""
    node = RealNode(binaries, workdir)
    node.prepare()
    plane = ControlPlane(binaries, workdir, node_address=node.address, watchdog=watchdog)
    try:
        plane.start()
        plane.start_controller_manager()
        if scheduler:
            plane.start_scheduler()
        node.join(plane)
    except BaseException:
        stop_cluster(plane, node)
        raise
    return plane, node


def stop_cluster(plane: ControlPlane, node: RealNode) -> list[str]:
    """Stop every process (node first, then the servers) and sweep the node; what could not be removed."""
    try:
        plane.stop()
    finally:
        problems = node.cleanup()
    return problems
