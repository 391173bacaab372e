"""gunicorn configuration for the container: `gunicorn -c python:migops.webhook.gunicorn_conf`.

The same settings as `migops webhook` (migops.webhook.server.gunicorn_options), from the environment:
MIGOPS_WEBHOOK_TLS_CERT / _TLS_KEY (default /etc/migops/tls/tls.crt, tls.key: the mounted Secret),
MIGOPS_WEBHOOK_PORT (8443), MIGOPS_WEBHOOK_WORKERS (2), MIGOPS_WEBHOOK_THREADS (16), MIGOPS_WEBHOOK_LOG_LEVEL
(debug|info|warning|error, default info), MIGOPS_WEBHOOK_LOG_FORMAT (text|json, default text), MIGOPS_WEBHOOK_TMP
(a writable emptyDir when the root filesystem is read-only), and KUBECONFIG (in-cluster when unset).

MIGOPS_WEBHOOK_CERTS=self (the manifests' default): before serving, make Secret
MIGOPS_WEBHOOK_CERT_SECRET (default migops-webhook-tls, in POD_NAMESPACE) valid and publish its CA
into the webhook configurations (migops.certs.bootstrap), so a fresh install needs no manual step;
serve the pod's copy until the kubelet has mounted the Secret. =mounted (cert-manager, or a Secret
made by hand): serve the mounted files only.
"""

import os

from migops.webhook.server import DEFAULT_PORT, first_present_pair, gunicorn_options, prepare_metrics_dir

_workers = int(os.environ.get("MIGOPS_WEBHOOK_WORKERS", "2"))
prepare_metrics_dir(_workers)
_cert = os.environ.get("MIGOPS_WEBHOOK_TLS_CERT", "/etc/migops/tls/tls.crt")
_key = os.environ.get("MIGOPS_WEBHOOK_TLS_KEY", "/etc/migops/tls/tls.key")
_pairs = [(_cert, _key)]

if os.environ.get("MIGOPS_WEBHOOK_CERTS", "mounted") == "self":
    from pathlib import Path

    from migops import logs
    from migops.certs import bootstrap
    from migops.kube.client import api_client

    # The bootstrap's lines in the webhook's format (gunicorn's logconfig takes over once it starts).
    logs.setup(
        "webhook",
        os.environ.get("MIGOPS_WEBHOOK_LOG_LEVEL", "info"),
        os.environ.get("MIGOPS_WEBHOOK_LOG_FORMAT", "text"),
    )
    _settings = bootstrap.Settings(
        namespace=os.environ.get("POD_NAMESPACE", "migops-system"),
        secret=os.environ.get("MIGOPS_WEBHOOK_CERT_SECRET", "migops-webhook-tls"),
        service=os.environ.get("MIGOPS_WEBHOOK_SERVICE", "migops-webhook"),
        configurations=tuple(os.environ.get("MIGOPS_WEBHOOK_CONFIGURATIONS", "migops-webhook").split(",")),
    )
    # Closed before gunicorn forks its workers: no connection of the master is shared with them.
    with api_client(os.environ.get("KUBECONFIG") or None) as _api:
        _own = bootstrap.ensure_at_start(_api, _settings, Path(os.environ.get("MIGOPS_WEBHOOK_TMP") or "/tmp") / "tls")
    _pairs.append((str(_own), str(_own)))

# gunicorn checks at start that its certfile exists: the first pair present now; each connection
# then takes the first pair present then (first_present_pair).
_cert, _key = next(((c, k) for c, k in _pairs if os.path.isfile(c) and os.path.isfile(k)), _pairs[0])
globals().update(
    gunicorn_options(
        tls_cert=_cert,
        tls_key=_key,
        port=int(os.environ.get("MIGOPS_WEBHOOK_PORT", str(DEFAULT_PORT))),
        workers=_workers,
        threads=int(os.environ.get("MIGOPS_WEBHOOK_THREADS", "16")),
        log_level=os.environ.get("MIGOPS_WEBHOOK_LOG_LEVEL", "info"),
        log_format=os.environ.get("MIGOPS_WEBHOOK_LOG_FORMAT", "text"),
    )
)
ssl_context = first_present_pair(_pairs)
wsgi_app = "migops.webhook.wsgi:app"
