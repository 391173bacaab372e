"""The agent's Event reasons (on the Node, reporting controller migops.io/agent), each with what it means
and what to do (docs/troubleshooting.md). The node's state label and `migops.io/mig.config.reason` say the
same in words."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from migops.mig.explain import Explanation


class AgentEvent(StrEnum):
    CONFIG_PENDING = "MigConfigPending"
    CONFIG_APPLIED = "MigConfigApplied"
    CONFIG_FAILED = "MigConfigFailed"
    REBOOTING = "Rebooting"
    DRIFT_DETECTED = "MigDriftDetected"
    DRIFT_REPAIRED = "MigDriftRepaired"
    DRIFT_RESOLVED = "MigDriftResolved"
    DRIFT_REPAIR_HELD = "MigDriftRepairHeld"


AGENT_EVENTS: Mapping[AgentEvent, Explanation] = {
    AgentEvent.CONFIG_PENDING: Explanation(
        "The node's GPUs are being reconfigured to the config its label names (state `pending`); the message "
        "lists what changes on which GPU.",
        "Nothing; GPU clients on the changed GPUs are paused until it ends.",
    ),
    AgentEvent.CONFIG_APPLIED: Explanation(
        "The config is applied and verified (state `success`); the message counts the driver calls per GPU.",
        "Nothing.",
    ),
    AgentEvent.CONFIG_FAILED: Explanation(
        "The config could not be applied (state `failed`): it does not fit the GPUs, instances it must destroy "
        "are in use, the driver refused a call, or the API server could not be written. Nothing half-done is "
        "left: the GPUs are as before or as the config says, and the clients are restored. The agent retries "
        "with backoff; the reconciler halts the rollout (RolloutHalted).",
        "Read `migops.io/mig.config.reason` on the Node (`kubectl describe node`): it names the GPU and the "
        "cause. For instances in use, stop the workloads on them (or run the agent with `--destroy-in-use`).",
    ),
    AgentEvent.REBOOTING: Explanation(
        "A MIG mode change on the named GPUs cannot take effect by a GPU reset; the agent reboots the node "
        "(`--with-reboot`).",
        "Nothing; without `--with-reboot`, reboot the node yourself.",
    ),
    AgentEvent.DRIFT_DETECTED: Explanation(
        "The GPUs differ from the applied config (someone ran `nvidia-smi mig`, a GPU was reset, MIG mode was "
        "switched off): `migops.io/mig.drift` on the Node says what differs. The published labels follow "
        "what exists.",
        "With `--drift=repair` (the default) the agent repairs it through the safe flow; with `--drift=report`, "
        "put the GPUs back or let the next config change do it.",
    ),
    AgentEvent.DRIFT_REPAIRED: Explanation(
        "The agent put the GPUs back to the applied config after drift.",
        "Nothing; find out who changes the GPUs by hand if it recurs.",
    ),
    AgentEvent.DRIFT_RESOLVED: Explanation(
        "The GPUs match the applied config again because someone put them back by hand.", "Nothing."
    ),
    AgentEvent.DRIFT_REPAIR_HELD: Explanation(
        "The GPUs drifted again after `--drift-max-repairs` repairs within `--drift-window`: repairs are held "
        "until the window frees one (no repair loop). State `failed` meanwhile.",
        "Find what keeps changing the GPUs (a host service, a person, another MIG manager) and stop it.",
    ),
}
