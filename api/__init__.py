"""What the parts share about the Kubernetes objects they meet on, as mig-parted's `api/spec/v1` is for
its format: `names` (every label, annotation and field manager migops reads or writes, GPU Operator/GFD
and ours), `objects` (frozen views of a Node, a ClusterPolicy and managedFields, built from an object as
the client returns it) and `migsync` (the MigSync resource's API names and the repository files it
points at). Above `migops.mig` (which it re-exports GFD's names from) and beneath every part: the
webhook, the reconciler, the agent and gitops import it, never each other (docs/interfaces.md).
"""
