"""migops: declarative, GitOps-managed NVIDIA MIG partitioning for Kubernetes."""
