"""The agent's state as values: `AgentState`, what lasts from one look at the node to the next (the
config last acted on, its outcome, the retry schedule, the drift phase), and `FlowRun`, what one run
of the flow works out, filled in step by step and dropped at its end.

The loop never edits an `AgentState`: each look returns a new one (`dataclasses.replace`) and the
controller swaps it in, as the reconciler does with its `SyncState`. `DriftPhase`'s values are the
states of the drift diagram in docs/agent.md (tests/agent/test_agent_structure.py holds them equal).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migops.agent.backend import Device, GpuState
from migops.agent.plan import Desired, GpuPlan
from migops.agent.reasons import AgentEvent
from migops.api.names import STATE_FAILED
from migops.mig.catalogue import GpuModel
from migops.mig.spec import MigPartedConfig
from migops.mig.strategy import Strategy


class DriftPhase(enum.Enum):
    IN_SYNC = "in-sync"  # the GPUs match the applied config, or no config is applied yet
    REPORTED = "drifted-reported"  # --drift=report: the drift is told (state failed), never repaired
    REPAIRING = "repairing"  # a repair started and has not succeeded yet; its retries are repairs too
    HELD = "held"  # drift recurred more often than the window allows: repairs wait (state failed)


@dataclass(frozen=True)
class DriftState:
    """The drift checks of the config in force."""

    phase: DriftPhase = DriftPhase.IN_SYNC
    reported: str = ""  # the drift text last published (the drift annotation); "" when none
    next_check: float = 0.0  # monotonic time of the next check
    held_until: float = 0.0  # in `held`: repairs wait until then
    repairs: tuple[float, ...] = ()  # monotonic times of the repairs within the window
    desired: tuple[Desired, ...] | None = None  # the config validated on the GPUs, once per config


@dataclass(frozen=True)
class ConfigRequest:
    """What to apply: the label's config name, the parsed file (or why there is none)."""

    name: str
    config: MigPartedConfig | None
    problem: str | None  # the ConfigMap is missing, unreadable, or does not parse
    strategy: Strategy
    clients_namespace: str
    # Why the content is not acted on yet: a MigSync manages the node and its applied record holds another
    # text (agent/watch.py). Not part of the key: the same content is acted on once the verdict is in.
    waiting: str | None = None

    @property
    def digest(self) -> str | None:
        if self.config is None:
            return None
        try:
            return self.config.digest(self.name)
        except KeyError:
            return None

    @property
    def key(self) -> tuple[str, str | None, Strategy]:
        """What makes a run: the name, this config's content (or the problem), the strategy."""
        return (self.name, self.digest or self.problem, self.strategy)


@dataclass(frozen=True)
class RunOutcome:
    """How a run of the flow (or a drift check that reported) ended."""

    state: str  # success | failed | rebooting | pending (the node was given another config meanwhile)
    reason: str = ""
    paused: bool = False  # were GPU clients paused on the way
    touched: tuple[int, ...] = ()  # GPUs that saw a driver call that changes them
    steps: int = 0  # driver calls that changed something


@dataclass(frozen=True)
class AgentState:
    """What lasts between looks at the node."""

    key: tuple[Any, ...] | None = None  # the config (ConfigRequest.key) last acted on
    outcome: RunOutcome | None = None  # its last outcome
    failures: int = 0  # failed runs in a row
    next_retry: float = 0.0  # monotonic time of the next retry of a failure
    drift: DriftState = DriftState()
    waiting: str | None = None  # the reconciler's verdict on the MIG ConfigMap's content waited for, and why

    @property
    def retrying(self) -> bool:
        """A failed run waits for its retry (not a drift report or a held repair, which wait for the GPUs)."""
        return (
            self.outcome is not None
            and self.outcome.state == STATE_FAILED
            and self.drift.phase not in (DriftPhase.REPORTED, DriftPhase.HELD)
        )


@dataclass(frozen=True)
class NodeEvent:
    """An Event to record about the Node."""

    reason: AgentEvent
    message: str
    warning: bool = False


@dataclass(frozen=True)
class NodeReport:
    """What the node is told at one point: the state label (None: unchanged), annotations (None drops
    one) and Events. `agent.report.tell` is the one place that writes them."""

    state: str | None = None
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    events: tuple[NodeEvent, ...] = ()


@dataclass(frozen=True)
class FlowEnding:
    """Where the flow stopped: the state it ends in, and why (failed)."""

    state: str
    reason: str = ""


@dataclass
class FlowRun:
    """One run of the flow, filled in step by step (steps write here only; `finish` reads it)."""

    request: ConfigRequest
    node: dict[str, Any]
    prior: str | None = None  # the state label the run starts from (the reboot-loop guard reads it)
    devices: Sequence[Device] = ()
    models: list[GpuModel] = field(default_factory=list)
    desired: list[Desired] = field(default_factory=list)
    states: list[GpuState] = field(default_factory=list)  # the GPUs as last read
    plans: list[GpuPlan] = field(default_factory=list)
    paused: bool = False  # the GPU clients' deploy labels were paused
    stopped: list[str] = field(default_factory=list)  # host units stopped
    touched: set[int] = field(default_factory=set)
    steps: int = 0  # driver calls that changed something

    @property
    def mode_change(self) -> list[int]:
        """The GPUs whose MIG mode changes."""
        return [p.index for p in self.plans if p.mode_change]

    def outcome(self, state: str, reason: str = "") -> RunOutcome:
        return RunOutcome(state, reason, self.paused, tuple(sorted(self.touched)), self.steps)
