"""gunicorn configuration for the container: `gunicorn -c python:migops.webhook.gunicorn_conf`.

The same settings as `migops webhook` (migops.webhook.server.gunicorn_options), from the environment:
MIGOPS_WEBHOOK_TLS_CERT / _TLS_KEY (default /etc/migops/tls/tls.crt, tls.key: the mounted Secret),
MIGOPS_WEBHOOK_PORT (8443), MIGOPS_WEBHOOK_WORKERS (2), MIGOPS_WEBHOOK_THREADS (16), MIGOPS_WEBHOOK_LOG_LEVEL
(debug|info|warning|error, default info), MIGOPS_WEBHOOK_LOG_FORMAT (text|json, default text), MIGOPS_WEBHOOK_TMP
(a writable emptyDir when the root filesystem is read-only), and KUBECONFIG (in-cluster when unset).
"""
import os

from migops.webhook.server import DEFAULT_PORT, gunicorn_options, prepare_metrics_dir

_workers = int(os.environ.get("MIGOPS_WEBHOOK_WORKERS", "2"))
prepare_metrics_dir(_workers)

globals().update(gunicorn_options(
    tls_cert=os.environ.get("MIGOPS_WEBHOOK_TLS_CERT", "/etc/migops/tls/tls.crt"),
    tls_key=os.environ.get("MIGOPS_WEBHOOK_TLS_KEY", "/etc/migops/tls/tls.key"),
    port=int(os.environ.get("MIGOPS_WEBHOOK_PORT", str(DEFAULT_PORT))),
    workers=_workers,
    threads=int(os.environ.get("MIGOPS_WEBHOOK_THREADS", "16")),
    log_level=os.environ.get("MIGOPS_WEBHOOK_LOG_LEVEL", "info"),
    log_format=os.environ.get("MIGOPS_WEBHOOK_LOG_FORMAT", "text"),
))
wsgi_app = "migops.webhook.wsgi:app"
