"""The migops admission webhook: validating and mutating, Flask under gunicorn, TLS.

`app` (routes), `admission` (AdmissionReview in and out), `state` (informers -> Snapshot), the rules
(`configmaps`, `nodelabels`, `policies`, `pods`) and mutations (`annotate`, `pods.mutate`), `checks`
(the MIG core's verdicts, memoised), `server` (gunicorn), `metrics`. Every MIG rule is the MIG core's.
"""

# The environment variable naming prometheus_client's multi-process directory: `server` sets it before
# anything imports `metrics`, which reads it; defined here so neither module imports the other.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
