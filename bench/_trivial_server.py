"""The baseline of bench/webhook_load.py: the same gunicorn configuration as `migops webhook`
(migops.webhook.server.gunicorn_options), serving one Flask route that answers a fixed allow."""
from __future__ import annotations

import sys

from flask import Flask, Response

from migops.webhook.server import gunicorn_options, prepare_metrics_dir, serve

ALLOW = (b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":'
         b'{"uid":"00000000-0000-0000-0000-000000000000","allowed":true}}')


def load() -> Flask:
    app = Flask("trivial")

    @app.post("/validate")
    def validate() -> Response:
        return Response(ALLOW, 200, mimetype="application/json")

    return app


if __name__ == "__main__":
    cert, port, workers, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    prepare_metrics_dir(workers)
    serve(gunicorn_options(tls_cert=cert, tls_key=cert, bind="127.0.0.1", port=port, workers=workers,
                           threads=threads, log_level="warning"), load)
