"""Serve the app with gunicorn over TLS: `migops webhook` and the container's gunicorn config.

gthread workers (migops.webhook.worker.ThreadWorker: gunicorn's, without its two stalls) keep
connections alive, so the API server's admission client pays one TLS handshake per connection, not per
review; each new connection loads the certificate files afresh, so rotated files
(migops certs rotate, or a re-mounted Secret) are served to new connections without a restart, while
open ones finish on the old certificate. Each worker process runs its own informers (threads do not
survive fork) and is ready once they have listed.
"""

from __future__ import annotations

import gc
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# prometheus_client's multi-process directory (MULTIPROC_ENV) must be set before prometheus_client is
# first imported (its value class is chosen then), so nothing here imports migops.webhook.metrics at
# module level: with two workers, each one's counts would otherwise be kept in memory and /metrics read none.
from migops.webhook import MULTIPROC_ENV

DEFAULT_PORT = 8443


def gunicorn_options(
    *,
    tls_cert: str,
    tls_key: str,
    bind: str = "0.0.0.0",
    port: int = DEFAULT_PORT,
    workers: int = 1,
    threads: int = 16,
    log_level: str = "info",
    log_format: str = "text",
) -> dict[str, Any]:
    """The gunicorn settings, one place for `migops webhook` and the container's config."""
    from migops import logs

    return {
        "bind": [f"{bind}:{port}"],
        "worker_class": "migops.webhook.worker.ThreadWorker",
        "workers": workers,
        "threads": threads,
        # The API server's client keeps idle connections for 90 s; keeping them open this long saves a
        # handshake on every review in a quiet cluster. Idle connections wait in the poller, not a thread.
        "keepalive": 75,
        "timeout": 30,
        "graceful_timeout": 10,
        "certfile": tls_cert,
        "keyfile": tls_key,
        "accesslog": None,
        "logger_class": "migops.webhook.gunicorn_logger.Logger",  # and so no access log (see there)
        "errorlog": "-",
        "loglevel": log_level,
        # gunicorn's own lines and the app's, through migops.logs (--log-format text|json)
        "logconfig_dict": logs.gunicorn_logconfig("webhook", log_level, log_format),
        "preload_app": False,
        "proc_name": "migops-webhook",
        "child_exit": _child_exit,
        "worker_tmp_dir": os.environ.get("MIGOPS_WEBHOOK_TMP") or None,
    }


def first_present_pair(pairs: Sequence[tuple[str, str]]) -> Callable[[Any, Callable[[], Any]], Any]:
    """A gunicorn `ssl_context` hook (gunicorn calls it for each new connection) that serves the first
    (cert, key) whose files both exist: the mounted Secret once the kubelet has it, until then the
    pod's own copy (migops.certs.bootstrap). The rest is gunicorn's own context factory."""

    def hook(conf: Any, default_factory: Callable[[], Any]) -> Any:
        import ssl

        from gunicorn import sock

        cert, key = next(((c, k) for c, k in pairs if os.path.isfile(c) and os.path.isfile(k)), pairs[-1])
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=conf.ca_certs)
        context.load_cert_chain(certfile=cert, keyfile=key)
        context.verify_mode = conf.cert_reqs
        if conf.ciphers:
            context.set_ciphers(conf.ciphers)
        alpn = getattr(sock, "_get_alpn_protocols", lambda _conf: None)(conf)
        if alpn:
            context.set_alpn_protocols(alpn)
        return context

    return hook


def _child_exit(server: Any, worker: Any) -> None:
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def prepare_metrics_dir(workers: int) -> None:
    """Multi-process metrics need a directory, named before prometheus_client is imported anywhere."""
    if workers > 1 and not os.environ.get(MULTIPROC_ENV):
        base = os.environ.get("MIGOPS_WEBHOOK_TMP") or None
        os.environ[MULTIPROC_ENV] = tempfile.mkdtemp(prefix="migops-webhook-metrics-", dir=base)


def app_from_kubeconfig(
    kubeconfig: str | None, context: str | None = None, reconciler_users: Sequence[str] = ()
) -> Callable[[], Any]:
    """A factory run in each worker: informers on the API server, then the Flask app.
    `reconciler_users`: who may change what git owns on managed nodes (default: the reconciler's
    ServiceAccount in migops-system)."""

    def load() -> Any:
        from migops.kube.client import api_client
        from migops.mig.gfd import mig_resources
        from migops.webhook.app import ReviewPorts, create_app
        from migops.webhook.memory import bound_malloc
        from migops.webhook.state import DEFAULT_RECONCILER_USER, ClusterState

        bound_malloc()  # before the informers and the first review allocate
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        api = api_client(kubeconfig, context)
        state = ClusterState(api, reconciler_users=reconciler_users or (DEFAULT_RECONCILER_USER,)).start()
        mig_resources()  # build the catalogue's tables now, not in the first review
        app = create_app(state, ReviewPorts(read_configmap=configmap_reader(api), read_migsync=migsync_reader(api)))
        # Everything loaded so far (the Kubernetes client's models, Flask, the catalogue: tens of
        # thousands of objects) lives as long as the worker; a full collection walking it is a pause
        # any review could hit. Frozen, collections walk only what reviews allocate.
        gc.collect()
        gc.freeze()
        return app

    return load


READ_TIMEOUT = 5.0  # seconds for the one GET a ClusterPolicy switch costs (the API server waits 10 s for us)


def configmap_reader(api: Any) -> Callable[[str, str], dict[str, Any] | None]:
    """A ConfigMap by (namespace, name) as a plain object, None when it does not exist: what a
    ClusterPolicy switching to another MIG ConfigMap is judged on (webhook/policies.py)."""
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(api)

    def read(namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj = core.read_namespaced_config_map(name, namespace, _request_timeout=READ_TIMEOUT)
        except k8s.exceptions.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return api.sanitize_for_serialization(obj)

    return read


LIVE_READS_PER_SECOND = 20  # per worker: the API server's own reviews miss the cache rarely


def migsync_reader(api: Any, per_second: int = LIVE_READS_PER_SECOND) -> Callable[[str, str], Any]:
    """A MigSync by (namespace, name) as the webhook's MigSyncRef, None when it (or its CRD) does not
    exist: read when a Node names one the informer does not hold yet, so that a cache miss is never
    taken for "unmanaged" (webhook/nodelabels.py). At most `per_second` reads a second: reviews
    posted to the port directly, naming made-up MigSyncs, cannot turn the webhook into a flood of GETs
    (over the limit the read fails, and the review is denied: never admitted)."""
    from kubernetes import client as k8s

    from migops.api.migsync import GROUP, PLURAL, VERSION
    from migops.webhook.ratelog import Window
    from migops.webhook.state import migsync_ref

    objects = k8s.CustomObjectsApi(api)
    window = Window(per_interval=per_second, interval=1.0)

    def read(namespace: str, name: str) -> Any:
        if window.admit() is None:
            raise RuntimeError(f"more than {per_second} MigSync reads a second")
        try:
            obj = objects.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=READ_TIMEOUT
            )
        except k8s.exceptions.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return migsync_ref(obj)

    return read


def serve(options: dict[str, Any], load: Callable[[], Any]) -> None:
    """Run gunicorn in this process until it is stopped (SIGTERM/SIGINT: graceful)."""
    from gunicorn.app.base import BaseApplication

    class Application(BaseApplication):
        def load_config(self) -> None:
            for key, value in options.items():
                if value is not None:
                    self.cfg.set(key, value)

        def load(self) -> Any:
            return load()

    for path in (options["certfile"], options["keyfile"]):
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such file")
    Application().run()
