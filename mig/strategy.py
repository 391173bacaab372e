"""The GPU Operator's MIG strategies (ClusterPolicy `mig.strategy`): how GFD and the device plugin advertise
MIG devices. A module of its own so that the command line offers the choices without loading the
validator (migops.mig.validate re-exports both names)."""

from __future__ import annotations

from typing import Literal

Strategy = Literal["none", "single", "mixed"]
STRATEGIES: tuple[Strategy, ...] = ("none", "single", "mixed")


def as_strategy(value: object) -> Strategy | None:
    """`value` as a Strategy (a ClusterPolicy's `mig.strategy`, nodes.yaml's `strategy`, a flag), None
    when it is not one of the three: parsed once where it is read, so no caller narrows a str again."""
    if value == "none":
        return "none"
    if value == "single":
        return "single"
    if value == "mixed":
        return "mixed"
    return None
