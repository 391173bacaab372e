"""etcd + kube-apiserver on loopback, TLS everywhere, RBAC on: a real API server for tests.

What runs: etcd (TLS, client certificates required, `--unsafe-no-fsync`) and kube-apiserver
(TLS on a free loopback port, x509 client-certificate authentication, RBAC authorization,
service-account token signing), and on request kube-scheduler (`start_scheduler`). No
controller-manager or kubelet: namespaces never finish terminating, nothing garbage-collects, Nodes
are plain objects, and a Pod the scheduler binds is never run.

With `node_address` (the real node of migops.local.realnode) the API server is what pods need
instead: it serves on that address (a bridge the setup made; pods reach it there and through the
`kubernetes` Service, whose endpoints it now maintains), admits Pods through ServiceAccount admission
(kube-controller-manager, `start_controller_manager`, creates the `default` ServiceAccounts),
authorizes kubelets with the Node authorizer + NodeRestriction, and dials kubelets by InternalIP with
its own client certificate, verifying theirs.

Three CAs keep trust separate: `ca` signs the API server's serving certificate (the one
kubeconfigs pin), `client-ca` signs user certificates (any user kubeconfig we mint), and
`etcd-ca` signs etcd's certificates, so a user certificate can never talk to etcd directly.
"""

from __future__ import annotations

import json
import re
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from migops import certs
from migops.local import kubeconfig
from migops.local.binaries import Binaries
from migops.local.ports import LOOPBACK, free_ports
from migops.local.process import ProcessRef, is_alive, kill, spawn, stop
from migops.local.watchdog import start_watchdog

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

ADMIN_USER = "admin"
ADMIN_GROUPS = ("system:masters",)
SCHEDULER_USER = "system:kube-scheduler"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
# kube-controller-manager's node-lifecycle controller would mark the simulated Nodes (no kubelet)
# Unknown within ~40 s and taint them NoExecute, evicting their pods.
CONTROLLERS = "*,-node-lifecycle-controller"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
# The first address of the service range is the `kubernetes` Service; put it in the SANs so a
# future in-cluster style client verifying the serving certificate does not trip over it.
_SERVING_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
_SERVING_IPS = (LOOPBACK, "10.0.0.1")
_PORT_CLASH = re.compile(r"address already in use|bind: address", re.IGNORECASE)
_START_ATTEMPTS = 3


class ControlPlaneError(RuntimeError):
    """The control plane did not come up (or a request to it failed); carries log excerpts."""


@dataclass(frozen=True)
class Ports:
    """The three loopback ports one control plane listens on."""

    api: int
    etcd_client: int
    etcd_peer: int


class ControlPlane:
    """Start, use and stop one etcd + kube-apiserver pair.

    Use as a context manager or call start()/stop(). `workdir` holds certificates, etcd data,
    logs and kubeconfigs; by default a temporary directory removed on stop(). With
    `watchdog=True` (the default) a helper process stops the servers if this Python process
    dies without calling stop(), even by SIGKILL.
    """

    def __init__(
        self,
        binaries: Binaries,
        workdir: Path | None = None,
        *,
        start_timeout: float = 90.0,
        stop_timeout: float = 15.0,
        watchdog: bool = True,
        apiserver_args: Sequence[str] = (),
        node_address: str | None = None,
    ) -> None:
        self.binaries = binaries
        self._own_workdir = workdir is None
        self.workdir = (Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="migops-cp-"))).resolve()
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._use_watchdog = watchdog
        self._apiserver_args = tuple(apiserver_args)  # extra flags, e.g. for tests of watch expiry
        self.node_address = node_address  # serve pods too (see the module docstring)
        self.address = node_address or LOOPBACK
        self._watchdog: subprocess.Popen[str] | None = None
        self._procs: dict[str, tuple[subprocess.Popen[bytes] | None, ProcessRef]] = {}
        self.ports: Ports | None = None
        self.ready_seconds: float | None = None
        self.scheduler_port: int | None = None
        self._user_serial = 0

    # ----------------------------------------------------------------- paths and values
    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def admin_kubeconfig(self) -> Path:
        """Kubeconfig of user `admin` in `system:masters` (bypasses RBAC)."""
        return self.workdir / "admin.kubeconfig"

    @property
    def url(self) -> str:
        if self.ports is None:
            raise ControlPlaneError("control plane not started")
        return f"https://{self.address}:{self.ports.api}"

    @property
    def ca_pem(self) -> bytes:
        """The CA that signed the API server's serving certificate."""
        return (self.pki / "ca.crt").read_bytes()

    @property
    def processes(self) -> dict[str, ProcessRef]:
        """Running servers by name (`etcd`, `kube-apiserver`), in start order."""
        return {name: ref for name, (_, ref) in self._procs.items()}

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Bring etcd and kube-apiserver up; return once namespace `default` can be read."""
        if self._procs:
            return self
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_pki()
        if self._use_watchdog:
            self._watchdog = start_watchdog()
        try:
            for attempt in range(1, _START_ATTEMPTS + 1):
                self.ports = Ports(*free_ports(3))
                try:
                    self._start_etcd()
                    self._start_apiserver()
                    break
                except _PortClash:
                    self._stop_servers()
                    if attempt == _START_ATTEMPTS:
                        raise ControlPlaneError("ports kept clashing; giving up") from None
            self._write_admin_kubeconfig()
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = time.monotonic() - began
        return self

    def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver, as a crash or the OOM killer ends it; etcd and every other process run on.
        `start_apiserver` brings it back on the same address and port, with the same certificates."""
        popen, ref = self._procs.pop("kube-apiserver")
        kill(ref, popen=popen)
        self._tell_watchdog(f"release {ref.pid}")

    def start_apiserver(self) -> None:
        """Start kube-apiserver again after `kill_apiserver`; return once it is ready."""
        if "kube-apiserver" in self._procs:
            raise ControlPlaneError("kube-apiserver is running")
        self._start_apiserver()

    def adopt(self, name: str, popen: subprocess.Popen[bytes] | None, ref: ProcessRef) -> None:
        """Make a process started beside the servers (webhook, agents, reconciler) one of them: the
        watchdog stops it if this process dies, stop() stops it (in reverse start order, so before the
        API server it talks to), and detach() hands it over with the rest."""
        self._procs[name] = (popen, ref)
        self._tell_watchdog(f"watch {ref.pid} {ref.start_time}")

    def start_scheduler(self) -> None:
        """Start kube-scheduler against this API server (idempotent); return once it is healthy.

        It authenticates as `system:kube-scheduler`, the identity the bootstrap RBAC policy grants
        exactly what a scheduler needs, so nothing here runs with more than its own rights. Without a
        kubelet it binds Pods to Nodes by their allocatable resources, labels and taints, and records
        why a Pod cannot be placed: where MIG workloads would land. Stopped by stop() with the rest.
        """
        self._start_component(
            "kube-scheduler",
            self.binaries.kube_scheduler,
            SCHEDULER_USER,
            self.workdir / "scheduler",
            ["--leader-elect=false"],
        )

    def start_controller_manager(self) -> None:
        """Start kube-controller-manager (idempotent; for a plane with `node_address`); return once healthy.

        Every controller but node-lifecycle (CONTROLLERS), each with its own ServiceAccount's token
        (`--use-service-account-credentials`, as kubeadm runs it): Deployments, ReplicaSets, DaemonSets,
        endpoints, namespace deletion, garbage collection, the `default` ServiceAccounts and the
        `kube-root-ca.crt` ConfigMap pods verify the API server with.
        """
        p = self.pki
        self._start_component(
            "kube-controller-manager",
            self.binaries.kube_controller_manager,
            CONTROLLER_MANAGER_USER,
            self.workdir / "controller-manager",
            [
                "--leader-elect=false",
                f"--controllers={CONTROLLERS}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={p / 'sa.key'}",
                f"--root-ca-file={p / 'ca.crt'}",
            ],
        )

    def _start_component(self, name: str, binary: Path, user: str, cert_dir: Path, extra: list[str]) -> None:
        """Start a control-plane component authenticating as `user` on a free loopback port; wait for /healthz."""
        if name in self._procs:
            return
        if not self._procs:
            raise ControlPlaneError("control plane not started")
        identity = self.kubeconfig_for(user)
        for attempt in range(1, _START_ATTEMPTS + 1):
            (port,) = free_ports(1)
            argv = [
                str(binary),
                f"--kubeconfig={identity}",
                f"--authentication-kubeconfig={identity}",
                f"--authorization-kubeconfig={identity}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--cert-dir={cert_dir}",
                *extra,
            ]
            self._launch(name, argv)
            insecure = ssl.create_default_context()
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE  # its self-signed serving cert; /healthz carries no secret
            try:
                self._wait(
                    name, f"https://{LOOPBACK}:{port}/healthz", insecure, ready=lambda body: body.strip() == "ok"
                )
                if name == "kube-scheduler":
                    self.scheduler_port = port
                return
            except _PortClash:
                popen, ref = self._procs.pop(name)
                stop(ref, timeout=self.stop_timeout, popen=popen)
                if attempt == _START_ATTEMPTS:
                    raise ControlPlaneError(f"{name}: ports kept clashing; giving up") from None

    def stop(self) -> None:
        """Stop the servers in reverse start order (scheduler, kube-apiserver, etcd); wait until all are
        gone. Safe to call twice."""
        try:
            self._stop_servers()
        finally:
            self._close_watchdog()
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def detach(self) -> dict[str, ProcessRef]:
        """Leave the servers running after this process exits (for `migops local up`)."""
        refs = self.processes
        if self._watchdog is not None and self._watchdog.stdin is not None:
            for ref in refs.values():
                self._tell_watchdog(f"release {ref.pid}")
        self._close_watchdog()
        self._procs.clear()
        return refs

    # ----------------------------------------------------------------- credentials
    def kubeconfig_for(self, user: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig authenticating as `user` in `groups` by client certificate.

        The user has no permissions beyond the bootstrap ones every authenticated user has
        (discovery, self-subject reviews) until a test binds a Role to it.
        """
        client = certs.issue_client(self._client_ca(), user, groups)
        return kubeconfig.write(self._user_path(user), kubeconfig.build(self.url, self.ca_pem, user, client=client))

    def kubeconfig_for_service_account(self, namespace: str, name: str, *, expiration_seconds: int = 3600) -> Path:
        """A kubeconfig holding a real bound token for ServiceAccount `namespace/name`.

        Creates the ServiceAccount if needed and asks the API server for a token
        (TokenRequest), so the token is signed with the service-account key like in a
        real cluster and authenticates as `system:serviceaccount:<namespace>:<name>`.
        """
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        with self.api_client() as api:
            core = k8s.CoreV1Api(api)
            try:
                core.create_namespaced_service_account(
                    namespace, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
                )
            except ApiException as exc:
                if exc.status != 409:
                    raise
            request = core.create_namespaced_service_account_token(
                name,
                namespace,
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenRequest",
                    "spec": {"expirationSeconds": expiration_seconds},
                },
            )
        user = f"system:serviceaccount:{namespace}:{name}"
        return kubeconfig.write(
            self._user_path(user), kubeconfig.build(self.url, self.ca_pem, user, token=request.status.token)
        )

    def api_client(self, kubeconfig_path: Path | None = None) -> ApiClient:
        """A `kubernetes.client.ApiClient` for a kubeconfig (default: admin)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig_path or self.admin_kubeconfig))

    # ----------------------------------------------------------------- internals
    def _write_pki(self) -> None:
        if (self.pki / "sa.key").exists():
            return  # a restart in the same workdir keeps its identity
        ca = certs.create_ca("migops-local-ca")
        ca.write(self.pki / "ca.crt", self.pki / "ca.key")
        ips = (*_SERVING_IPS, *((self.node_address,) if self.node_address else ()))
        certs.issue_serving(ca, "kube-apiserver", dns_names=_SERVING_DNS, ip_addresses=ips).write(
            self.pki / "apiserver.crt", self.pki / "apiserver.key"
        )
        client_ca = certs.create_ca("migops-local-client-ca")
        client_ca.write(self.pki / "client-ca.crt", self.pki / "client-ca.key")
        certs.issue_client(client_ca, ADMIN_USER, ADMIN_GROUPS).write(self.pki / "admin.crt", self.pki / "admin.key")
        # What the API server shows a kubelet for logs/exec (the kubelet's webhook authorizer lets
        # system:masters through).
        certs.issue_client(client_ca, "kube-apiserver-kubelet-client", ADMIN_GROUPS).write(
            self.pki / "apiserver-kubelet-client.crt", self.pki / "apiserver-kubelet-client.key"
        )
        etcd_ca = certs.create_ca("migops-local-etcd-ca")
        etcd_ca.write(self.pki / "etcd-ca.crt", self.pki / "etcd-ca.key")
        certs.issue_serving(etcd_ca, "etcd", dns_names=("localhost",), ip_addresses=(LOOPBACK,)).write(
            self.pki / "etcd.crt", self.pki / "etcd.key"
        )
        certs.issue_client(etcd_ca, "kube-apiserver-etcd-client").write(
            self.pki / "etcd-client.crt", self.pki / "etcd-client.key"
        )
        sa_key = certs.new_private_key_pem()
        (self.pki / "sa.pub").write_bytes(certs.public_key_pem(sa_key))
        key_path = self.pki / "sa.key"
        key_path.touch(mode=0o600)
        key_path.write_bytes(sa_key)

    def serving_ca(self) -> certs.KeyPair:
        """The CA of the API server's serving certificate (also signs the real node's kubelet certificate,
        which the API server verifies)."""
        return certs.KeyPair((self.pki / "ca.crt").read_bytes(), (self.pki / "ca.key").read_bytes())

    def _client_ca(self) -> certs.KeyPair:
        return certs.KeyPair((self.pki / "client-ca.crt").read_bytes(), (self.pki / "client-ca.key").read_bytes())

    def _user_path(self, user: str) -> Path:
        self._user_serial += 1
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", user)
        return self.workdir / "users" / f"{self._user_serial:03d}-{safe}.kubeconfig"

    def _start_etcd(self) -> None:
        assert self.ports is not None
        client = f"https://{LOOPBACK}:{self.ports.etcd_client}"
        peer = f"http://{LOOPBACK}:{self.ports.etcd_peer}"
        p = self.pki
        # Fresh data every start: a retry on other ports must not meet a member record that
        # still names the old peer URL, and `migops local up` after a crash starts clean.
        shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
        argv = [
            str(self.binaries.etcd),
            "--name=migops-local",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=migops-local={peer}",
            f"--cert-file={p / 'etcd.crt'}",
            f"--key-file={p / 'etcd.key'}",
            f"--trusted-ca-file={p / 'etcd-ca.crt'}",
            "--client-cert-auth=true",
            "--unsafe-no-fsync=true",  # test data: durability buys nothing, fsync costs seconds
            "--log-level=warn",
        ]
        self._launch("etcd", argv)
        ctx = _tls_context(p / "etcd-ca.crt", p / "etcd-client.crt", p / "etcd-client.key")
        self._wait("etcd", f"{client}/health", ctx, ready=lambda body: json.loads(body).get("health") == "true")

    def _start_apiserver(self) -> None:
        assert self.ports is not None
        p = self.pki
        argv = [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers=https://{LOOPBACK}:{self.ports.etcd_client}",
            f"--etcd-cafile={p / 'etcd-ca.crt'}",
            f"--etcd-certfile={p / 'etcd-client.crt'}",
            f"--etcd-keyfile={p / 'etcd-client.key'}",
            f"--bind-address={self.address}",
            # Without it the API server derives an address from the default route and fails
            # on hosts that have none (controller-runtime #669).
            f"--advertise-address={self.address}",
            f"--secure-port={self.ports.api}",
            f"--cert-dir={self.workdir / 'apiserver'}",
            f"--tls-cert-file={p / 'apiserver.crt'}",
            f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'client-ca.crt'}",
            f"--authorization-mode={'Node,RBAC' if self.node_address else 'RBAC'}",
            f"--service-account-issuer={self.url}",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            *(self._node_args() if self.node_address else self._loopback_only_args()),
            *self._apiserver_args,
        ]
        self._launch("kube-apiserver", argv)
        ctx = _tls_context(p / "ca.crt", p / "admin.crt", p / "admin.key")
        self._wait("kube-apiserver", f"{self.url}/readyz", ctx, ready=lambda body: body.strip() == "ok")
        self._wait(
            "kube-apiserver",
            f"{self.url}/api/v1/namespaces/default",
            ctx,
            ready=lambda body: json.loads(body).get("metadata", {}).get("name") == "default",
        )

    @staticmethod
    def _loopback_only_args() -> list[str]:
        return [
            # No controller-manager creates `default` ServiceAccounts, so this admission
            # plugin would reject every Pod; everything else keeps the upstream defaults
            # (mutating/validating webhooks stay on).
            "--disable-admission-plugins=ServiceAccount",
            # The `kubernetes` Service endpoint would be 127.0.0.1, which endpoint validation
            # rejects; nothing here routes to it anyway.
            "--endpoint-reconciler-type=none",
        ]

    def _node_args(self) -> list[str]:
        p = self.pki
        return [
            "--enable-admission-plugins=NodeRestriction",
            # No DNS resolves the node's name: dial it by the address it reports.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={p / 'ca.crt'}",
            f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={p / 'apiserver-kubelet-client.key'}",
        ]

    def _launch(self, name: str, argv: list[str]) -> None:
        log = self.logs / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as f:
            f.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
        popen, ref = spawn(argv, log)
        self.adopt(name, popen, ref)

    def _wait(self, name: str, url: str, ctx: ssl.SSLContext, ready: Callable[[str], bool]) -> None:
        """Poll `url` until `ready(body)`; fail fast if the server process exits."""
        deadline = time.monotonic() + self.start_timeout
        popen, ref = self._procs[name]
        last = "no answer yet"
        while time.monotonic() < deadline:
            if (popen is not None and popen.poll() is not None) or not is_alive(ref):
                tail = self._log_tail(name)
                if _PORT_CLASH.search(tail):
                    raise _PortClash(name)
                raise ControlPlaneError(
                    f"{name} exited during startup; last log lines ({self.logs / (name + '.log')}):\n{tail}"
                )
            try:
                with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
                    body = resp.read().decode()
                if ready(body):
                    return
                last = body[:300]
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = str(exc)
            time.sleep(0.1)
        raise ControlPlaneError(
            f"{name} not ready after {self.start_timeout:.0f}s ({url}: {last}); last log lines:\n{self._log_tail(name)}"
        )

    def _log_tail(self, name: str, lines: int = 25) -> str:
        try:
            text = (self.logs / f"{name}.log").read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _stop_servers(self) -> None:
        errors: list[str] = []
        for name, (popen, ref) in reversed(list(self._procs.items())):
            try:
                stop(ref, timeout=self.stop_timeout, popen=popen)
                self._tell_watchdog(f"release {ref.pid}")
            except RuntimeError as exc:
                errors.append(f"{name}: {exc}")
        self._procs.clear()
        if errors:
            raise ControlPlaneError("; ".join(errors))

    def _tell_watchdog(self, line: str) -> None:
        if self._watchdog is None or self._watchdog.stdin is None:
            return
        try:
            self._watchdog.stdin.write(line + "\n")
            self._watchdog.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def _close_watchdog(self) -> None:
        dog, self._watchdog = self._watchdog, None
        if dog is None:
            return
        try:
            if dog.stdin is not None:
                dog.stdin.close()
        except BrokenPipeError:
            pass
        try:
            dog.wait(timeout=30)
        except subprocess.TimeoutExpired:
            dog.kill()
            dog.wait()

    def _write_admin_kubeconfig(self) -> None:
        admin = certs.KeyPair((self.pki / "admin.crt").read_bytes(), (self.pki / "admin.key").read_bytes())
        kubeconfig.write(self.admin_kubeconfig, kubeconfig.build(self.url, self.ca_pem, ADMIN_USER, client=admin))


def identifying_arguments(workdir: Path) -> tuple[str, ...]:
    """One argument each server of the control plane in `workdir` is started with, and no other.

    Lets `migops local down` and tests find leftover servers by their command line.
    """
    return (
        f"--data-dir={workdir / 'etcd'}",
        f"--cert-dir={workdir / 'apiserver'}",
        f"--cert-dir={workdir / 'scheduler'}",
        f"--cert-dir={workdir / 'controller-manager'}",
    )


class _PortClash(Exception):
    """A server lost the race for its port; start() retries on fresh ports."""


def _tls_context(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    return ctx
