"""The WSGI app for a plain `gunicorn` command line (the container): state from $KUBECONFIG or the
pod's service account. Imported in each worker (preload_app is off), so each gets its informers.
MIGOPS_WEBHOOK_RECONCILER_USERS: the reconciler's identities, comma-separated (as `migops webhook
--reconciler-user`; default its ServiceAccount in migops-system)."""

import os

from migops.webhook.server import app_from_kubeconfig

_users = [u.strip() for u in os.environ.get("MIGOPS_WEBHOOK_RECONCILER_USERS", "").split(",") if u.strip()]
app = app_from_kubeconfig(os.environ.get("KUBECONFIG"), reconciler_users=_users)()
