"""What every migops component needs from the Kubernetes API, written once.

`names` (labels, annotations, field managers), `client` (an ApiClient from a kubeconfig or the pod's
service account), `ssa` (server-side apply of any object), `informer` (list + watch into an in-memory
cache that survives 410 Gone and dropped connections), `events` (core v1 Events), `clusterpolicy` (the
GPU Operator's MIG settings), `nodes` (which GPUs a Node holds). The webhook, reconciler and agent meet
only through the API server (docs/interfaces.md); this package is how they talk to it.
"""
