"""The baseline of bench/webhook_load.py: the same gunicorn configuration as `migops webhook`
(migops.webhook.server.gunicorn_options), serving one Flask route that answers a fixed allow (the direct
load's baseline), and /echo/validate, which answers allow for the request's uid (the API server refuses
a response for another uid; it is in the body's first bytes, where the API server writes it): a
do-nothing webhook registered with the API server, the least any validating webhook costs there."""

from __future__ import annotations

import re
import sys

from flask import Flask, Response, request

from migops.webhook.server import gunicorn_options, prepare_metrics_dir, serve

ALLOW = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":'
    b'{"uid":"00000000-0000-0000-0000-000000000000","allowed":true}}'
)
ECHO = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"%s","allowed":true}}'
UID = re.compile(rb'"uid":"([0-9a-fA-F-]{1,64})"')


def load() -> Flask:
    app = Flask("trivial")

    @app.post("/validate")
    def validate() -> Response:
        return Response(ALLOW, 200, mimetype="application/json")

    @app.post("/echo/validate")
    def echo() -> Response:
        found = UID.search(request.get_data()[:512])
        return Response(ECHO % (found.group(1) if found else b""), 200, mimetype="application/json")

    return app


if __name__ == "__main__":
    cert, port, workers, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    prepare_metrics_dir(workers)
    serve(
        gunicorn_options(
            tls_cert=cert,
            tls_key=cert,
            bind="127.0.0.1",
            port=port,
            workers=workers,
            threads=threads,
            log_level="warning",
        ),
        load,
    )
