"""The node agent: makes the node's GPUs match the MIG config its `nvidia.com/mig.config` label names.

It follows mig-manager's flow and labels (mig-hardware.md section 5.3) without its known holes: the
config is validated before anything is paused, every failure restores the GPU clients, sets `failed`
with a reason and is retried with backoff, and the geometry is applied as a diff at explicit
placements. GPUs are reached through a small backend interface (`backend.Backend`): NVML (`nvml`) on
a GPU node, or a simulated GPU (`simulated`) that refuses what hardware refuses.
"""
