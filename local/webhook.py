"""The admission webhook in `migops local`: certificates, the server process, its registration.

`start` creates (or renews) the webhook's CA and serving certificate under <workdir>/webhook/, starts
`migops webhook` on a free loopback port as a detached server (recorded like etcd and kube-apiserver,
so `migops local down` stops it), waits until it is ready (its informers have listed), and registers
it with the API server at https://127.0.0.1:PORT/... with the CA bundle.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kubernetes.client import ApiClient

from migops.api.names import LOCAL_MANAGER
from migops.certs.rotation import DirectoryStore, rotate
from migops.local.ports import LOOPBACK, free_ports
from migops.local.process import ProcessRef, is_alive, spawn, stop
from migops.webhook.registration import register
from migops.webhook.state import DEFAULT_RECONCILER_USER


@dataclass(frozen=True)
class LocalWebhook:
    popen: subprocess.Popen[bytes]
    ref: ProcessRef
    url: str
    certs: Path


def certs_dir(workdir: Path) -> Path:
    return workdir / "webhook"


def kubeconfig_path(workdir: Path) -> Path:
    return workdir / "webhook.kubeconfig"


def identifying_arguments(workdir: Path) -> tuple[str]:
    """The argument only this workdir's webhook is started with (for `down`'s safety net)."""
    return (f"--tls-cert={certs_dir(workdir) / 'tls.pem'}",)


def certificates(path: Path) -> tuple[Path, bytes]:
    """A CA and a serving certificate for loopback under `path` (created or renewed): the one file with
    the key and certificate that the server loads, and the CA bundle that trusts it."""
    store = DirectoryStore(path)
    material = rotate(store, dns_names=["localhost"], ip_addresses=[LOOPBACK], publish=lambda bundle: None).material
    return store.serving_file, material.bundle


def command(
    *,
    cert: Path | str,
    key: Path | str,
    port: int,
    kubeconfig: Path | str,
    workers: int = 1,
    threads: int | None = None,
    reconciler_users: Sequence[str] = (),
) -> list[str]:
    """`migops webhook` serving on loopback: the local stack's command line, and the benchmarks'."""
    return [
        sys.executable,
        "-m",
        "migops",
        "webhook",
        f"--tls-cert={cert}",
        f"--tls-key={key}",
        f"--port={port}",
        f"--bind-address={LOOPBACK}",
        f"--kubeconfig={kubeconfig}",
        f"--workers={workers}",
        *([f"--threads={threads}"] if threads is not None else []),
        "--log-level=warning",
        *(f"--reconciler-user={u}" for u in reconciler_users),
    ]


def spawn_ready(
    argv: Sequence[str], port: int, bundle: bytes, log: Path, timeout: float
) -> tuple[subprocess.Popen[bytes], ProcessRef, str]:
    """Start a detached webhook and wait until /readyz answers 200 (its informers have listed) over TLS
    that `bundle` trusts: (process, its record, its URL). Stopped again, with RuntimeError, when not."""
    popen, ref = spawn(list(argv), log)
    url = f"https://{LOOPBACK}:{port}"
    try:
        _wait_ready(url, bundle, popen, ref, log, timeout)
    except BaseException:
        stop(ref, popen=popen)
        raise
    return popen, ref, url


def start(
    api: ApiClient,
    workdir: Path,
    kubeconfig: Path,
    *,
    log: Path,
    timeout: float = 90.0,
    port: int | None = None,
    workers: int = 1,
    reconciler_users: Sequence[str] = (DEFAULT_RECONCILER_USER,),
) -> LocalWebhook:
    """Start the webhook for the control plane with `kubeconfig` (its own identity: in `migops local`
    the ServiceAccount of manifests/base/webhook, migops.local.identity) and register it with `api`
    (the installer's, an admin: the registration is not the webhook's own write); raise
    RuntimeError (after stopping it) when it does not become ready. `reconciler_users`: who may change
    a managed node's nvidia.com/mig.config (the reconciler's ServiceAccount, which the local one runs
    as too)."""
    pem, bundle = certificates(certs_dir(workdir))
    port = port or free_ports(1)[0]
    argv = command(
        cert=pem,  # <workdir>/webhook/tls.pem: identifying_arguments, what `down` finds it by
        key=pem,
        port=port,
        kubeconfig=kubeconfig,
        workers=workers,
        reconciler_users=reconciler_users,
    )
    popen, ref, url = spawn_ready(argv, port, bundle, log, timeout)
    try:
        register(api, url, bundle, field_manager=LOCAL_MANAGER)
    except BaseException:
        stop(ref, popen=popen)
        raise
    return LocalWebhook(popen, ref, url, pem.parent)


def _wait_ready(url: str, bundle: bytes, popen, ref: ProcessRef, log: Path, timeout: float) -> None:
    ctx = ssl.create_default_context(cadata=bundle.decode())
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if popen.poll() is not None or not is_alive(ref):
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else ""
            raise RuntimeError(f"the webhook exited during startup; last log lines ({log}):\n{tail}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", context=ctx, timeout=5) as resp:
                if resp.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.1)
    raise RuntimeError(f"the webhook at {url} was not ready after {timeout:.0f}s ({last}); see {log}")
