"""The reconciler: a config repo's desired state (from `migops.gitops`) applied to the cluster.

`plan` (pure: desired state + nodes → the next wave of writes), `apply` (server-side apply with errors
classified and retried with backoff), `controller` (the sync loop: informers, safety, events, status),
`status` (the MigSync CRD and its conditions), `diff` (what a revision would change), `server`
(/healthz, /readyz, /metrics, the signed POST /hook), `metrics`, `main` (leader election, SIGTERM).
"""
