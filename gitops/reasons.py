"""Why gitops refuses a revision: the reasons its errors carry, as conditions and Events show them, and
the rules of nodes.yaml; each with what it means and what to do (docs/troubleshooting.md).

Declared once here; the reconciler reads them from here (never as string copies) to tell a source that
could not be read (worth retrying) from a revision that must not be applied (stalled until a new commit).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from migops.mig.explain import Explanation


class SourceReason(StrEnum):
    # SourceError: the repository or a file of it could not be read.
    GIT_UNREACHABLE = "GitUnreachable"
    REF_NOT_FOUND = "RefNotFound"
    GIT_FAILED = "GitFailed"
    # VerificationError: unsigned, badly signed, or signed by a key nobody trusts.
    VERIFICATION_FAILED = "VerificationFailed"
    # RepoError: the revision's files do not make a valid desired state.
    VALIDATION_FAILED = "ValidationFailed"
    STRATEGY_MISMATCH = "StrategyMismatch"
    TOO_MANY_DEFAULTED = "TooManyDefaulted"


# The source could not be read: nothing is known about the revision; the fetch is retried with backoff.
UNREADABLE = frozenset({SourceReason.GIT_UNREACHABLE, SourceReason.REF_NOT_FOUND, SourceReason.GIT_FAILED})


SOURCE_REASONS: Mapping[SourceReason, Explanation] = {
    SourceReason.GIT_UNREACHABLE: Explanation(
        "The config repository could not be reached (network, DNS, TLS, SSH host key or credentials). The "
        "fetch is retried with backoff; the cluster keeps the revision in force, enforced from its applied record.",
        "Check `spec.url` and that the reconciler's pod reaches it (`kubectl logs deploy/migops-reconciler`); "
        "for a private repository, the reconciler's credentials (`--ssh-key` and `--known-hosts`, or "
        "`--https-username` and `--https-password-file`; docs/reconciler.md, Sources and signatures).",
    ),
    SourceReason.REF_NOT_FOUND: Explanation(
        "`spec.ref` names no branch, tag or commit of the repository.",
        "Fix `spec.ref` (or push the branch); `git ls-remote URL` lists what there is.",
    ),
    SourceReason.GIT_FAILED: Explanation(
        "git itself failed on the repository (not a network error): a corrupt cache, `spec.path` that is not a "
        "directory at that revision, or git missing from the image. The message has git's words.",
        "Fix `spec.path`; for a corrupt cache, restart the reconciler's pod (its cache is an emptyDir).",
    ),
    SourceReason.VERIFICATION_FAILED: Explanation(
        "`spec.verify` is set and the revision is unsigned, badly signed, or signed by a key the MigSync does "
        "not trust. Nothing of it is applied; the revision in force stays.",
        "Sign the commit with a trusted key (`git commit -S`), or add the signer's key to `spec.verify` "
        "or to the reconciler's `--allowed-signers` / `--trusted-key` (docs/reconciler.md, Sources and signatures).",
    ),
    SourceReason.VALIDATION_FAILED: Explanation(
        "The revision's config.yaml and nodes.yaml do not make a valid desired state: a rule of the MIG config "
        "or of nodes.yaml fails on the cluster's nodes. Nothing of the revision is applied (stalled until a new "
        "commit); the revision in force stays. `status.problems` lists each finding with its rule.",
        "Run `migops validate config.yaml nodes.yaml` (and `migops diff` against the cluster) on the commit, "
        "fix what it reports and push a new commit; each rule's entry below says how.",
    ),
    SourceReason.STRATEGY_MISMATCH: Explanation(
        "nodes.yaml's `strategy` differs from the ClusterPolicy's `spec.mig.strategy`: the geometry was "
        "written for another way of advertising MIG devices. Nothing is applied.",
        "Make nodes.yaml's `strategy` the cluster's, or switch the ClusterPolicy first (the webhook checks the "
        "switch against the nodes' configs).",
    ),
    SourceReason.TOO_MANY_DEFAULTED: Explanation(
        "The revision would move more nodes to `default` than `rollout.maxDefaulted` allows, because no "
        "assignment matches them any more (a typo in a selector must not turn MIG off on a pool). Nothing is applied.",
        "Fix the selectors, list the nodes by name, or raise `rollout.maxDefaulted` if the move is meant.",
    ),
}

NODES_RULES: Mapping[str, Explanation] = {
    "nodes-owned-elsewhere": Explanation(
        "An assignment (or the default) gives a config to nodes whose MIG geometry another manager owns: the "
        "GPU Operator's DRA stack (label `nvidia.com/gpu.deploy.dra-driver`, on a GPUCluster cluster) or a "
        "dynamic MIG manager (`migops.io/mig-owner`). The reconciler leaves them alone (phase `Skipped`) and "
        "applies the commit to the rest. A warning.",
        "Narrow the assignment to the nodes migops manages, or take the nodes from their owner first (docs/dra.md).",
    ),
    "file-missing": Explanation(
        "config.yaml or nodes.yaml is missing at that revision (under `spec.path`).",
        "Commit both files in the directory `spec.path` names.",
    ),
    "invalid-strategy": Explanation(
        "A strategy that is not `none`, `single` or `mixed` (nodes.yaml's `strategy`, or a ClusterPolicy's "
        "`spec.mig.strategy`, which the webhook denies).",
        "Write one of `none`, `single`, `mixed`: the GPU Operator's own values.",
    ),
    "invalid-configmap": Explanation(
        "nodes.yaml's `configMap` is not a mapping with `name` and `namespace`.",
        "Write `configMap: {name: default-mig-parted-config, namespace: gpu-operator}`, or leave it out to "
        "take the ClusterPolicy's.",
    ),
    "invalid-name": Explanation(
        "`configMap.name` or `configMap.namespace` is not a valid Kubernetes name.",
        "Use lowercase letters, digits and `-` (a namespace at most 63 characters).",
    ),
    "invalid-config-name": Explanation(
        "`default` (or an assignment's `config`) is not a config name string.",
        "Write the name of a config of config.yaml.",
    ),
    "invalid-prune": Explanation("`prune` is not true or false.", "Write `prune: true` or `prune: false`."),
    "invalid-rollout": Explanation(
        "`rollout` is not a mapping.",
        "Write `rollout: {maxUnavailable: 1}` (also `maxDefaulted`, `progressDeadlineSeconds`).",
    ),
    "invalid-max-unavailable": Explanation(
        "`rollout.maxUnavailable` is not a whole number >= 1 or a percentage from `1%` to `100%`.",
        'Write a count (`2`) or a quoted percentage (`"25%"`).',
    ),
    "invalid-maxdefaulted": Explanation(
        "`rollout.maxDefaulted` is not a whole number >= 0.",
        "Write how many nodes a commit may move to `default` at most, or leave it out (no limit).",
    ),
    "invalid-progressdeadlineseconds": Explanation(
        "`rollout.progressDeadlineSeconds` is not a whole number >= 1.",
        "Write the seconds a node may take to reconfigure (default 600).",
    ),
    "nodes-file-too-large": Explanation(
        "nodes.yaml is larger than its bound (512 KiB): each resolve matches every assignment against every "
        "node, and the file is kept in the cluster's applied record. Nothing of the revision is applied.",
        "Select nodes by their labels (`nodeSelector`) rather than listing thousands by name.",
    ),
    "too-many-assignments": Explanation(
        "nodes.yaml has more assignments than its bound (1,000). Nothing of the revision is applied.",
        "Merge assignments of one config: one assignment lists any number of nodes (`nodes:`) or selects "
        "them by their labels (`nodeSelector`).",
    ),
    "invalid-assignments": Explanation(
        "`assignments` is not a list.", "Write `assignments:` followed by `- config: ...` items."
    ),
    "invalid-assignment": Explanation(
        "An assignment is not a mapping with `config` and `nodes` or `nodeSelector`.",
        "Write `- config: NAME` with `nodes: [node-1]` or `nodeSelector: {matchLabels: {...}}`.",
    ),
    "one-target": Explanation(
        "An assignment (or a suggest pool) gives both `nodes` and `nodeSelector`, or neither.",
        "Give exactly one of them.",
    ),
    "invalid-nodes": Explanation(
        "`nodes` is not a non-empty list of node names.", "List the node names, or use `nodeSelector`."
    ),
    "invalid-selector": Explanation(
        "`nodeSelector` is not a label selector (`matchLabels`, `matchExpressions` with `In`, `NotIn`, "
        "`Exists`, `DoesNotExist`), or a label key or value is not valid.",
        "Write it as in a Deployment's selector; the message names the field.",
    ),
    "empty-selector": Explanation(
        "An empty `nodeSelector` would match every node.", "Name the labels to match, or list the nodes."
    ),
    "invalid-suggest": Explanation("`suggest` is not a mapping.", "Write `suggest: {maxNodes: 4}` or leave it out."),
    "invalid-maxnodes": Explanation("`suggest.maxNodes` is not a whole number >= 1.", "Write a count of nodes."),
    "invalid-newconfigs": Explanation("`suggest.newConfigs` is not true or false.", "Write `true` or `false`."),
    "invalid-trustedprioritynamespaces": Explanation(
        "`suggest.trustedPriorityNamespaces` is not a list of namespace names.",
        "List the namespaces whose pods' system priorities `migops suggest` may trust (docs/suggest.md).",
    ),
    "invalid-maxpodspernamespace": Explanation(
        "`suggest.maxPodsPerNamespace` is not a whole number >= 1.",
        "Write how many pending pods of one namespace `migops suggest` counts at most.",
    ),
    "invalid-claimswithoutpods": Explanation(
        "`suggest.claimsWithoutPods` is not true or false.", "Write `true` or `false`."
    ),
    "invalid-pools": Explanation(
        "`suggest.pools` is not a list.", "Write `pools:` followed by `- configs: [...]` items."
    ),
    "invalid-pool": Explanation(
        "A suggest pool is not a mapping with `configs` and `nodes` or `nodeSelector`.",
        "Write `- configs: [NAME, ...]` with `nodes` or `nodeSelector`.",
    ),
    "invalid-configs": Explanation(
        "A suggest pool's `configs` is not a non-empty list of config names of config.yaml.",
        "List the configs `migops suggest` may choose from for that pool.",
    ),
    "node-assigned-twice": Explanation(
        "Two assignments list the same node by name.", "List each node in one assignment only."
    ),
    "selectors-overlap": Explanation(
        "A node matches the selectors of two assignments: which config it gets would be a guess.",
        "Make the selectors disjoint, or list the node by name under `nodes:` (names win over selectors).",
    ),
    "node-not-found": Explanation(
        "An assignment lists a node that does not exist (yet); it gets its config when it joins. A warning: "
        "condition AssignmentsMatched=False (MatchesNoNode), one Warning Event for every such entry (their "
        "count and the first five), `status.warnings`.",
        "Fix the node's name if it is a typo; otherwise nothing to do.",
    ),
    "matches-no-node": Explanation(
        "An assignment's `nodeSelector` matches no node, so nothing gets its config from it. A warning, as "
        "node-not-found.",
        "Compare the selector with the nodes' labels (`kubectl get nodes --show-labels`); GPU Feature "
        "Discovery's labels (`nvidia.com/gpu.product`) are the usual ones to select on.",
    ),
    "configmap-not-read": Explanation(
        "nodes.yaml's `configMap` is not the one the GPU Operator's mig-manager reads (the ClusterPolicy's "
        "`spec.migManager.config.name` in its namespace): the configs migops writes there are not applied by "
        "mig-manager. A warning.",
        "Remove `configMap` from nodes.yaml (it defaults to the ClusterPolicy's), or point the ClusterPolicy at it.",
    ),
    "does-not-fit-node": Explanation(
        "An assigned config cannot be applied to a node's GPUs (as GPU Feature Discovery or the agent labels "
        "them); the MIG rule that fails follows in the message. The whole revision is refused.",
        "Fix the config, or assign another one to those nodes; `migops diff` shows the nodes and the reason.",
    ),
    "does-not-fit": Explanation(
        "`migops validate nodes.yaml`: an assigned config (or `default`) cannot be applied to the GPUs given "
        "with `--gpu`, or to the GPU model the assignment's selector names.",
        "Fix the config or the assignment; the MIG rule that fails follows in the message.",
    ),
    "unknown-gpu-model": Explanation(
        "`migops validate nodes.yaml`: an assignment's selector names a GPU product migops does not know, so "
        "the config is not checked against it (a warning).",
        "Check the product's spelling against `migops gpus` (GPU Feature Discovery's `nvidia.com/gpu.product`).",
    ),
    "config-file-missing": Explanation(
        "`migops validate nodes.yaml`: no config.yaml beside it, so the config names are not checked.",
        "Keep config.yaml in the same directory (the reconciler reads both from one directory).",
    ),
    "config-file-invalid": Explanation(
        "`migops validate nodes.yaml`: the config.yaml beside it is invalid, so the config names are not checked.",
        "Run `migops validate config.yaml` and fix what it reports.",
    ),
}

FLEET_RULES: Mapping[str, Explanation] = {
    "gpu-operator-both-stacks": Explanation(
        "The inventory recorded both a ClusterPolicy and a GPUCluster in the cluster: the GPU Operator reconciles "
        "neither while both exist (each reports notReady) and labels no node. A warning: migops judges the "
        "nodes as recorded.",
        "Delete the one the cluster is not meant to run, then record the inventory again (`migops inventory`).",
    ),
    "duplicate-cluster": Explanation(
        "fleet.yaml names a cluster twice.", "Give each cluster one entry (a name of its own)."
    ),
    "inventory-missing": Explanation(
        "A cluster of fleet.yaml has no `clusters/<name>/inventory.yaml`, so its nodes.yaml cannot be checked offline.",
        "Record it: `migops inventory --cluster NAME --context CONTEXT -o clusters/NAME/inventory.yaml`, and "
        "commit it.",
    ),
    "inventory-of-another-cluster": Explanation(
        "The inventory in a cluster's directory was recorded of another cluster.",
        "Run `migops inventory --cluster NAME` against the right cluster (the message gives the command).",
    ),
    "label-not-in-inventory": Explanation(
        "A selector of the cluster's nodes.yaml reads a label its inventory does not record, so whether it "
        "matches the right nodes cannot be known offline.",
        "Record the label too: `migops inventory --cluster NAME --label KEY` (docs/fleet.md).",
    ),
    "shared-config-missing": Explanation(
        "A config of the fleet's shared config.yaml is missing from a cluster's config.yaml: every cluster "
        "carries the shared configs.",
        "Copy the config from the shared file into the cluster's.",
    ),
    "shared-config-differs": Explanation(
        "A cluster's config.yaml holds a shared config under the same name but with other content.",
        "Copy it unchanged from the shared file, or give the cluster's own config a name of its own.",
    ),
    "migsync-missing": Explanation(
        "A cluster has no `clusters/<name>/sync/migsync.yaml`, the MigSync the GitOps tool applies to it.",
        "Add it (docs/fleet.md shows one); its `spec.path` is the cluster's directory.",
    ),
    "not-a-migsync": Explanation(
        "The cluster's `sync/migsync.yaml` is not a MigSync (`migops.io/v1alpha1`).", "Fix its apiVersion and kind."
    ),
    "migsync-path": Explanation(
        "The cluster's MigSync follows another directory than the cluster's own: its reconciler would apply "
        "another cluster's geometry.",
        "Set `spec.path` to the cluster's directory (`clusters/<name>`).",
    ),
    "ref-not-pinned": Explanation(
        "The cluster's MigSync `spec.ref` is not a commit SHA: its reconciler would take every commit as soon "
        "as it polls, not at its wave's turn (a warning).",
        "Pin it: `migops fleet pin REV` writes every cluster's `spec.ref` (docs/fleet.md).",
    ),
}
