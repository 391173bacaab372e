"""An ApiClient found the way kubectl finds one: `--kubeconfig FILE`, else `$KUBECONFIG` (a list of files,
merged), else `~/.kube/config`, else the pod's service account; `--context` picks a context.

Merging follows kubectl (client-go's clientcmd loading rules): files that do not exist are skipped; for
clusters, users and contexts the first file that names one wins; so does the first file that sets
current-context. Relative certificate paths stay relative to the file that holds them.

The Kubernetes client is imported where a client is made, not with this module: every command line
registers `add_arguments`, and `migops validate` must not pay ~0.3 s to import a client it never uses
(tests/cli/test_startup.py).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes import client as k8s

ENV = "KUBECONFIG"
KUBECONFIG_HELP = (
    "kubeconfig file (default: $KUBECONFIG, a list of files merged as kubectl merges them; else "
    "~/.kube/config; else the pod's service account)"
)
CONTEXT_HELP = "the kubeconfig context to use (default: its current-context)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--kubeconfig and --context, spelled and explained the same on every command that talks to a cluster."""
    parser.add_argument("--kubeconfig", metavar="FILE", help=KUBECONFIG_HELP)
    parser.add_argument("--context", metavar="NAME", help=CONTEXT_HELP)


@dataclass(frozen=True)
class Found:
    """Where the credentials come from: the kubeconfig files (merged, in order), or none (in-cluster)."""

    origin: str  # "--kubeconfig", "$KUBECONFIG", "~/.kube/config" or "in-cluster"
    paths: tuple[Path, ...] = ()


def locate(
    kubeconfig: str | Path | None = None, environ: Mapping[str, str] | None = None, home: Path | None = None
) -> Found:
    """kubectl's order. A --kubeconfig that does not exist is an error (as in kubectl); a $KUBECONFIG whose
    files all do not exist is an empty kubeconfig, and so the in-cluster config (client-go does the same)."""
    env = os.environ if environ is None else environ
    if kubeconfig:
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            from kubernetes.config.config_exception import ConfigException

            raise ConfigException(f"--kubeconfig {kubeconfig}: no such file")
        return Found("--kubeconfig", (path,))
    listed = env.get(ENV, "")
    if listed:
        paths = tuple(dict.fromkeys(Path(p).expanduser() for p in listed.split(os.pathsep) if p))
        existing = tuple(p for p in paths if p.is_file())
        return Found("$KUBECONFIG", existing) if existing else Found("in-cluster")
    default = (home if home is not None else Path.home()) / ".kube" / "config"
    if default.is_file():
        return Found("~/.kube/config", (default,))
    return Found("in-cluster")


def api_client(kubeconfig: str | Path | None = None, context: str | None = None) -> k8s.ApiClient:
    """Each client gets its own Configuration, so several identities in one process (the tests run
    them side by side) never share credentials through the client library's global default."""
    from kubernetes import client as k8s
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

    found = locate(kubeconfig)
    configuration = k8s.Configuration()
    if not found.paths:
        if context:
            raise ConfigException(
                f"--context {context}: no kubeconfig (--kubeconfig, ${ENV} or ~/.kube/config) to find it in"
            )
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException as exc:
            raise ConfigException(
                f"no kubeconfig (--kubeconfig, ${ENV} or ~/.kube/config) and not in a pod ({exc})"
            ) from None
        return k8s.ApiClient(configuration)
    merger = KubeConfigMerger(os.pathsep.join(str(p) for p in found.paths))
    if merger.config is None:
        raise ConfigException(f"{found.origin}: no configuration found")
    # The client library lets the last file's current-context win; kubectl, the first one's.
    current = next(
        (
            merger.config_files[p].get("current-context")
            for p in merger.paths
            if merger.config_files[p].get("current-context")
        ),
        None,
    )
    if current:
        merger.config.value["current-context"] = current
    loader = KubeConfigLoader(
        config_dict=merger.config, config_base_path=None, active_context=context, config_persister=merger.save_changes
    )
    loader.load_and_set(configuration)
    return k8s.ApiClient(configuration)
