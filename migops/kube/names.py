"""The names components meet by (docs/interfaces.md): NVIDIA's where one exists, `migops.io/` otherwise."""
from __future__ import annotations

from migops.mig.gfd import DEVICE_ID_LABEL, MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL
from migops.mig.spec import CONFIGMAP_KEY

__all__ = [
    "CONFIGMAP_KEY", "DEVICE_ID_LABEL", "MIG_CONFIG_LABEL", "MIG_CONFIG_STATE_LABEL",
]

# nvidia.com/mig.config.state values: mig-manager's four, no others.
STATE_PENDING = "pending"
STATE_REBOOTING = "rebooting"
STATE_SUCCESS = "success"
STATE_FAILED = "failed"
STATES = (STATE_PENDING, STATE_REBOOTING, STATE_SUCCESS, STATE_FAILED)

# GPU clients the GPU Operator deploys by node label; paused while the geometry changes.
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
PAUSED_FOR_MIG_CHANGE = "paused-for-mig-change"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"

# Ours.
MIG_CONFIGMAP_LABEL = "migops.io/mig-config"  # "true" on any other ConfigMap holding a MIG config
GPUS_ANNOTATION = "migops.io/gpus"  # the node's GPUs in index order: "0x233010DE,0x233010DE"
APPLIED_ANNOTATION = "migops.io/mig.config.applied"
DIGEST_ANNOTATION = "migops.io/mig.config.digest"
REASON_ANNOTATION = "migops.io/mig.config.reason"
LAYOUT_ANNOTATION = "migops.io/mig.layout"

# Field managers (server-side apply) and event reporters.
RECONCILER_MANAGER = "migops-reconciler"
AGENT_MANAGER = "migops-agent"
CERTS_MANAGER = "migops-certs"
LOCAL_MANAGER = "migops-local"
WEBHOOK_CONTROLLER = "migops.io/webhook"
RECONCILER_CONTROLLER = "migops.io/reconciler"
AGENT_CONTROLLER = "migops.io/agent"
