"""A gunicorn server for tests/webhook/test_webhook_worker.py: `migops webhook`'s gunicorn settings
(worker class included) serving a small Flask app. argv: tls.pem, port, threads."""

from __future__ import annotations

import sys

from flask import Flask, request

from migops.webhook.server import gunicorn_options, serve


def load() -> Flask:
    app = Flask("worker-test")

    @app.get("/ping")
    def ping() -> str:
        return "pong"

    @app.post("/echo")
    def echo() -> str:
        return f"{len(request.get_data())} bytes"

    return app


if __name__ == "__main__":
    pem, port, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    serve(
        gunicorn_options(
            tls_cert=pem, tls_key=pem, bind="127.0.0.1", port=port, workers=1, threads=threads, log_level="debug"
        ),
        load,
    )
