"""Every label and annotation name migops reads or writes, and its field managers: NVIDIA's where one
exists (GPU Operator, mig-manager, GFD), `migops.io/` otherwise (docs/interfaces.md). One definition of
each: GFD's labels and the few names the MIG rules read live beside those rules in `migops.mig` (which
imports nothing above it) and are re-exported here; everything else is defined here. Every other module
imports the name from this module, never a string copy (tests/packaging/test_boundaries.py checks it).
"""

from __future__ import annotations

from migops.mig.gfd import (
    DEVICE_ID_LABEL,
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    GPUS_ANNOTATION,
    MIG_CAPABLE_LABEL,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    MIG_RESOURCE_PREFIX,
    MIG_STRATEGY_LABEL,
)
from migops.mig.gfd import PREFIX as NVIDIA_PREFIX
from migops.mig.sources import MIG_CONFIGMAP_LABEL
from migops.mig.spec import CONFIGMAP_KEY

__all__ = [
    "CONFIGMAP_KEY",
    "DEVICE_ID_LABEL",
    "GPU_COUNT_LABEL",
    "GPU_PRODUCT_LABEL",
    "GPU_RESOURCE",
    "GPUS_ANNOTATION",
    "MIG_CAPABLE_LABEL",
    "MIG_CONFIGMAP_LABEL",
    "MIG_CONFIG_LABEL",
    "MIG_CONFIG_STATE_LABEL",
    "MIG_RESOURCE_PREFIX",
    "MIG_STRATEGY_LABEL",
    "NVIDIA_PREFIX",
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
DEPLOY_MIG_MANAGER_LABEL = DEPLOY_LABEL_PREFIX + "mig-manager"  # the GPU Operator's: mig-manager runs where "true"
# The GPU Operator's, on the nodes its GPUCluster (the DRA stack, GPU Operator 26.7+) runs NVIDIA's DRA driver
# on; the ClusterPolicy stack removes it. "false" (or empty) keeps the driver off the node.
DEPLOY_DRA_DRIVER_LABEL = DEPLOY_LABEL_PREFIX + "dra-driver"
GPU_PRESENT_LABEL = NVIDIA_PREFIX + "gpu.present"  # the GPU Operator's, on every node with an NVIDIA GPU

# Ours. (migops.io/gpu.device-id, migops.io/gpus and migops.io/mig-config are defined beside the MIG rules
# that read them, in migops.mig, and re-exported above.)
# On a Node, by a person: names the dynamic MIG manager that owns its geometry (migops.kube.owners).
OWNER_LABEL = "migops.io/mig-owner"
APPLIED_ANNOTATION = "migops.io/mig.config.applied"
DIGEST_ANNOTATION = "migops.io/mig.config.digest"
REASON_ANNOTATION = "migops.io/mig.config.reason"
LAYOUT_ANNOTATION = "migops.io/mig.layout"
RESUME_ANNOTATION = "migops.io/resume"  # on a MigSync: set to any new value to resume a halted rollout
# On a Node, by the agent: what differs between the GPUs and the applied config ("gpu 1: missing 3g.40gb@4"),
# present only while they differ; the reconciler counts such a node as not in sync.
DRIFT_ANNOTATION = "migops.io/mig.drift"
# On a Node, by the reconciler: "<namespace>/<migsync>" that owns its nvidia.com/mig.config (git is the only
# writer: the webhook denies anyone else's change of that label while this is set).
MANAGED_BY_ANNOTATION = "migops.io/managed-by"
# On a Node, by the reconciler, in the same write as the label: the revision that gave it its config
# (status is rebuilt from it after a restart).
REVISION_ANNOTATION = "migops.io/mig.config.revision"
# On a MigSync, by its reconciler: deleting the MigSync first releases the nodes it manages (their
# managed-by and revision annotations removed, their labels left as they are), then lets it go.
MIGSYNC_FINALIZER = "migops.io/release-nodes"
# On a fleet's cluster Secret (Argo CD) and Kustomization (Flux): the wave the cluster rolls out in
# (fleet.yaml; migops.gitops.fleet_rollout).
FLEET_WAVE_LABEL = "migops.io/fleet-wave"
# On a Node, by a person: "true" takes it out of management (the reconciler leaves it and drops the
# annotation above; the webhook lets anyone set its nvidia.com/mig.config again).
UNMANAGED_LABEL = "migops.io/unmanaged"
# The webhook's: on a Namespace, "skip" keeps every migops webhook out of it.
WEBHOOK_SKIP_LABEL = "migops.io/webhook"
# On a Namespace: "single" opts its Pods in to translation (mig-<profile> -> nvidia.com/gpu + nodeSelector).
TRANSLATE_LABEL = "migops.io/mig-translate"
TRANSLATED_ANNOTATION = "migops.io/mig-translated-from"
# On a MIG ConfigMap, by the mutating webhook: what its content was validated for.
CONFIG_DIGEST_ANNOTATION = "migops.io/config-digest"
VALIDATED_STRATEGY_ANNOTATION = "migops.io/validated-strategy"
VALIDATED_GPUS_ANNOTATION = "migops.io/validated-gpus"

# What the agent writes on a Node: a node carrying any of these is run by the migops agent (the reconciler
# then waits for the digest), else by mig-manager or nothing.
AGENT_ANNOTATIONS = (DIGEST_ANNOTATION, APPLIED_ANNOTATION, GPUS_ANNOTATION, LAYOUT_ANNOTATION)

# On a Node, by `migops local`, in a dry run only: a label no agent owns, so its own-node policy must deny it
# (local/agent_identity.py waits for that denial to know the policy is in force).
POLICY_PROBE_LABEL = "migops.io/policy-probe"

# Field managers (server-side apply) and event reporters.
RECONCILER_MANAGER = "migops-reconciler"
AGENT_MANAGER = "migops-agent"
CERTS_MANAGER = "migops-certs"
LOCAL_MANAGER = "migops-local"
WEBHOOK_CONTROLLER = "migops.io/webhook"
RECONCILER_CONTROLLER = "migops.io/reconciler"
AGENT_CONTROLLER = "migops.io/agent"
