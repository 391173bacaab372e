"""The webhook's own rule IDs: what a denial or a warning with `[rule]` means and what to do
(docs/troubleshooting.md). The MIG rules it applies to config text are mig/rules.py's."""

from __future__ import annotations

from collections.abc import Mapping

from migops.mig.explain import Explanation

WEBHOOK_RULES: Mapping[str, Explanation] = {
    "object-limits": Explanation(
        "A name, label or annotation of the reviewed object is beyond Kubernetes' own limits (a review posted "
        "directly, not through the API server, which refuses such objects first).",
        "Send objects the API server would accept; the message names the field.",
    ),
    "configmap-binary-data": Explanation(
        "The MIG ConfigMap holds `config.yaml` under `binaryData`: mig-manager reads the config as text.",
        'Put it under `data."config.yaml"`.',
    ),
    "config-in-use": Explanation(
        "The write removes (or renames) a config that nodes still select with `nvidia.com/mig.config`, or "
        "deletes the ConfigMap in force while nodes select configs from it: mig-manager would have nothing to "
        "apply on them. The message names the nodes.",
        "Relabel those nodes first (through git when a MigSync manages them), then remove the config.",
    ),
    "fits-some-gpus": Explanation(
        "A config no node selects yet fits only some of the GPU models migops knows; admitted with a warning "
        "naming the nodes it could not serve.",
        "Nothing, if the config is meant for the models it fits; otherwise fix it before a node of another "
        "model selects it.",
    ),
    "gpus-unknown": Explanation(
        "The node (or the nodes selecting a config) have no GPU labels the webhook can read (`migops.io/gpus`, "
        "GPU Feature Discovery's `nvidia.com/gpu.product` and `gpu.count`), so the geometry is checked against "
        "the catalogue only. A warning.",
        "Run GPU Feature Discovery (or the agent) on the node; the check on its GPUs then follows.",
    ),
    "label-value": Explanation(
        "`nvidia.com/mig.config` is not a string (a review posted directly).", "Write the label as a string."
    ),
    "configmap-missing": Explanation(
        "The MIG ConfigMap the ClusterPolicy names does not exist or has no `config.yaml`: a node label (or a "
        "switch to that ConfigMap) would leave mig-manager nothing to apply.",
        "Create the ConfigMap first (the GPU Operator's `default-mig-parted-config`, or yours), then label the "
        "nodes or switch.",
    ),
    "configmap-invalid": Explanation(
        "The MIG ConfigMap in force is itself invalid, so no config of it can be assigned; the message quotes "
        "its first problem.",
        "Fix the ConfigMap (through git when a MigSync manages it); `migops validate` on its text shows every problem.",
    ),
    "configmap-unreadable": Explanation(
        "A ClusterPolicy switch to another MIG ConfigMap cannot be checked: the webhook may not read that "
        "ConfigMap (the gpu-operator overlay lets it read `migops-mig-config` only), or the read failed.",
        "Switch to a ConfigMap the webhook may read, or widen its RBAC; a failed read can be retried.",
    ),
    "dynamic-mig-owner": Explanation(
        "The node's MIG geometry is owned by another manager: the GPU Operator's DRA stack (a GPUCluster runs "
        "NVIDIA's DRA driver there and no MIG Manager; label `nvidia.com/gpu.deploy.dra-driver`) or a dynamic "
        "MIG manager (the DRA driver's DynamicMIG, HAMi, DAS; label `migops.io/mig-owner`): a second manager "
        "would fight it.",
        "Remove `nvidia.com/mig.config` from the node, or take the node from its owner first: "
        "`nvidia.com/gpu.deploy.dra-driver=false` for the DRA stack, the dynamic manager's own way otherwise "
        "(docs/dra.md).",
    ),
    "git-owned": Explanation(
        "The node is managed by a MigSync: git is the only writer of its `nvidia.com/mig.config`, so a change "
        "by anyone but the reconciler's identity is refused (403); on a ClusterPolicy, a switch to a MIG "
        "ConfigMap whose config.yaml differs from what the MigSync applies from git. The message names the "
        "MigSync, its repository and the file to change.",
        "Change nodes.yaml in git and let the reconciler apply it. To take a node out of management: "
        "`kubectl label node NODE migops.io/unmanaged=true`. Running the reconciler by hand: `migops "
        "reconcile --once --as` one of the identities the message lists.",
    ),
    "managed-by": Explanation(
        "`migops.io/managed-by` is written by the reconciler only; anyone else's change is refused (two writes "
        "could otherwise take a node out of management).",
        "Label the node `migops.io/unmanaged=true` to take it out, or change nodes.yaml in git.",
    ),
    "managed-by-unknown": Explanation(
        "`migops.io/managed-by` names a MigSync that does not exist, so the node is not git-owned; the write "
        "is admitted with this warning.",
        "If the MigSync was deleted without its reconciler running, remove the annotation "
        "(`kubectl annotate node NODE migops.io/managed-by-`).",
    ),
    "managed-by-unverified": Explanation(
        "`migops.io/managed-by` names a MigSync the webhook could not read (the API server did not answer, or "
        "too many such reads at once), so it cannot tell whether git owns the node: refused rather than guessed.",
        "Try again; if it persists, check the webhook's logs and its RBAC to read MigSyncs.",
    ),
    "revision": Explanation(
        "`migops.io/mig.config.revision` (the revision that gave the node its config, reported in the "
        "MigSync's status) is written by the reconciler only, with the label it describes; anyone else's "
        "change is refused, on every node.",
        "Leave the annotation to the reconciler.",
    ),
    "mig-manager-image": Explanation(
        "The ClusterPolicy enables mig-manager without `repository`, `image` and `version`.",
        "Give the mig-manager image you mirrored: repository, image and the exact version tag.",
    ),
    "unknown-mig-resource": Explanation(
        "A Pod requests `nvidia.com/mig-<profile>` that no GPU migops knows has; the message names the nearest.",
        "Fix the resource name (`migops gpus` lists each model's profiles).",
    ),
    "strategy-single": Explanation(
        "Under MIG strategy `single` MIG devices are advertised as `nvidia.com/gpu`, so a Pod requesting "
        "`nvidia.com/mig-<profile>` would never be scheduled.",
        "Request `nvidia.com/gpu` with a node selector on the product (the message gives it), or label the "
        "namespace `migops.io/mig-translate=single` to have the request rewritten.",
    ),
    "not-offered": Explanation(
        "No node offers the requested MIG resource now; the Pod stays Pending until one does (a warning).",
        "Add the profile to a config the nodes use, or `migops suggest` for a geometry that serves the pending Pods.",
    ),
    "mig-translated": Explanation(
        "The Pod's `nvidia.com/mig-<profile>` request was rewritten to `nvidia.com/gpu` because its namespace "
        "asks for it under strategy `single` (a warning, with the original in an annotation).",
        "Nothing.",
    ),
}
