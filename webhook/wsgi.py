"""The WSGI app for a plain `gunicorn` command line (the container): state from $KUBECONFIG or the
pod's service account. Imported in each worker (preload_app is off), so each gets its informers."""
import os

from migops.webhook.server import app_from_kubeconfig

app = app_from_kubeconfig(os.environ.get("KUBECONFIG"))()
