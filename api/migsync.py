"""The MigSync custom resource's API names and the files of the config repository it points at: what
the reconciler serves (reconciler/status.py: the CRD, spec and status) and the webhook reads (which
MigSync owns a node, where its nodes.yaml is), defined once so neither imports the other."""

from __future__ import annotations

GROUP, VERSION, PLURAL, KIND = "migops.io", "v1alpha1", "migsyncs", "MigSync"
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAME = f"{PLURAL}.{GROUP}"

# The repository's two files (docs/gitops.md), under the MigSync's spec.path.
CONFIG_FILE = "config.yaml"
NODES_FILE = "nodes.yaml"
