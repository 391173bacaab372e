"""The migops admission webhook: validating and mutating, Flask under gunicorn, TLS.

`app` (routes), `admission` (AdmissionReview in and out), `state` (informers -> Snapshot), the rules
(`configmaps`, `nodelabels`, `policies`, `pods`) and mutations (`annotate`, `pods.mutate`), `checks`
(the MIG core's verdicts, memoised), `server` (gunicorn), `metrics`. Every MIG rule is the MIG core's.
"""
