"""An ApiClient for a kubeconfig file, $KUBECONFIG, or the pod's service account, in that order."""
from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config


def api_client(kubeconfig: str | Path | None = None) -> k8s.ApiClient:
    """Each client gets its own Configuration, so several identities in one process (the tests run
    them side by side) never share credentials through the client library's global default."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return config.new_client_from_config(config_file=str(path))
    configuration = k8s.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return k8s.ApiClient(configuration)
