"""The config repository: fetch it with real git, verify who signed a commit, read it into one desired state.

`source` (fetch a local path, file://, https:// or ssh:// URL; follow a branch, pin a tag or a commit;
the revision is the commit SHA), `verify` (SSH allowed-signers and OpenPGP commit signatures),
`repo` (config.yaml + nodes.yaml → a checked RepoSpec), `desired` (RepoSpec + the cluster's Nodes →
which node gets which config, every assignment validated on the node's GPUs through `migops.mig`).
Fetching is separate from applying (that is `migops.reconciler`), as Flux separates its
source-controller from its kustomize-controller.
"""
