"""The GPU Operator's MIG strategies (ClusterPolicy `mig.strategy`): how GFD and the device plugin advertise
MIG devices. A module of its own so that the command line offers the choices without loading the
validator (migops.mig.validate re-exports both names)."""

from __future__ import annotations

from typing import Literal

Strategy = Literal["none", "single", "mixed"]
STRATEGIES: tuple[str, ...] = ("none", "single", "mixed")
