"""An API server outage at each point of the agent's flow, on a control plane of its own: kube-apiserver
killed (SIGKILL, as a crash or the OOM killer ends it), down for a while, started again; then how long
the node takes to read a reported state with its GPU clients' deploy labels restored.

Shared by tests/agent/test_agent_outage.py (what must hold) and bench/agent_outage.py (the figures).

The points, each on a node of its own with one simulated agent:
- `pending`: the agent's retry of a refused config (an instance with processes) meets the dead server
  at its first write, the `pending` report: the job ended while the server was down.
- `paused`: the clients are paused and the agent waits for a client pod to leave the node.
- `mid-apply`: driver calls under way (each slowed to `OP_DELAY`; 28 still to run when the server goes,
  so it is back before they end).
- `restoring`: the server goes as the last driver calls run and is still down when the apply ends: the
  restore of the deploy labels meets it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from agent_harness import AgentProc, annotations, client_pod, delete_client_pod, labels, set_config, state
from kubernetes.client import ApiClient
from polling import until

from migops.local.controlplane import ControlPlane

POINTS = ("pending", "paused", "mid-apply", "restoring")
DEPLOY = {
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
    "nvidia.com/gpu.deploy.dcgm-exporter": "false",
}
# Seconds each of the agent's driver calls takes: in `mid-apply` the calls still to run outlast an outage
# of 10 s and the API server's start; in `restoring` the last two end inside the outage.
OP_DELAY = {"mid-apply": 1.0, "restoring": 0.5}
CLIENT_POD = "nvidia-device-plugin-daemonset-outage"
# What the agent logs when a request meets the dead server, per point (agent/kube.py's request names).
MET = {
    "pending": "record Event MigConfigPending: the API server did not answer",
    "paused": None,  # the wait reads the pod watch's cache: no request meets the outage
    "mid-apply": None,  # driver calls only: no request meets the outage
    "restoring": "write the Node: the API server did not answer",
}


@dataclass(frozen=True)
class Recovery:
    point: str
    down: float  # seconds from the kill until the API server answered again (its start included)
    seconds: float | None  # from its return to the node reported with clients restored; None: not within the limit
    state: str | None  # the node's state label then
    deploy: dict[str, str]  # its GPU clients' deploy labels then
    applied: str | None  # migops.io/mig.config.applied then
    agent_alive: bool
    met: bool  # the agent's log shows a request that met the outage where the point says


def outage_at(
    point: str,
    plane: ControlPlane,
    api: ApiClient,
    agent: Callable[..., AgentProc],
    down: float,
    limit: float = 90.0,
) -> Recovery:
    """Run one point: `agent(node, gpus, *extra)` starts an agent for a fresh node; `api` is the admin's."""
    node = f"outage-{point}"
    proc = agent(node, "2x0x233010DE", "--pod-timeout", "120")
    _settled(api, node, "all-disabled")
    if point == "pending":
        killed = _pending(plane, api, proc, down)
    elif point == "paused":
        killed = _paused(plane, api, proc, down)
    else:
        killed = _apply(point, plane, api, proc, down)
    back = time.monotonic()
    seconds = _recovered(api, node, target(point), limit)
    got = labels(api, node)
    met = MET[point] is None or MET[point] in proc.log_text()
    return Recovery(
        point,
        back - killed,
        None if seconds is None else seconds - back,
        got.get("nvidia.com/mig.config.state"),
        {k: got.get(k, "") for k in DEPLOY},
        annotations(api, node).get("migops.io/mig.config.applied"),
        proc.proc is not None and proc.proc.poll() is None,
        met,
    )


def _outage(plane: ControlPlane, down: float, then: Callable[[], None] = lambda: None) -> float:
    """Kill the API server, run `then`, start it again `down` seconds after the kill; when it was killed."""
    plane.kill_apiserver()
    killed = time.monotonic()
    then()
    time.sleep(max(0.0, killed + down - time.monotonic()))
    plane.start_apiserver()
    return killed


def _pending(plane: ControlPlane, api: ApiClient, proc: AgentProc, down: float) -> float:
    set_config(api, proc.node, "all-1g.10gb")
    _settled(api, proc.node, "all-1g.10gb")
    proc.faults(in_use=[{"gpu": 0, "start": 0, "pids": [4242]}])  # a job on GPU 0's first instance
    set_config(api, proc.node, "all-2g.20gb")
    until(
        lambda: "running processes" in annotations(api, proc.node).get("migops.io/mig.config.reason", ""), 60, "refused"
    )
    return _outage(plane, down, proc.faults)  # the job ends while the server is down: the next retry goes ahead


def _paused(plane: ControlPlane, api: ApiClient, proc: AgentProc, down: float) -> float:
    client_pod(api, proc.node, CLIENT_POD)
    set_config(api, proc.node, "all-1g.10gb")
    until(
        lambda: labels(api, proc.node).get("nvidia.com/gpu.deploy.device-plugin") == "paused-for-mig-change",
        60,
        "paused",
    )
    killed = _outage(plane, down)
    delete_client_pod(api, CLIENT_POD)
    return killed


def _apply(point: str, plane: ControlPlane, api: ApiClient, proc: AgentProc, down: float) -> float:
    """all-disabled -> all-1g.10gb on 2 GPUs: two mode changes, a reset, 14 GPU and 14 compute instances."""
    proc.faults(op_delay=OP_DELAY[point])
    set_config(api, proc.node, "all-1g.10gb")
    total = 2 + 14 + 14  # set_mig_mode x 2 and the creations (the reset is counted apart)
    left = total - 2 if point == "mid-apply" else 2  # right after the mode changes; or the last two creations
    until(lambda: _calls(proc) >= total - left, 120, f"{total - left} driver calls")
    return _outage(plane, down)


def _calls(proc: AgentProc) -> int:
    return sum(n for ops in proc.ops() for op, n in ops.items() if op != "reset")


def _settled(api: ApiClient, node: str, name: str) -> None:
    until(
        lambda: state(api, node) == "success" and annotations(api, node).get("migops.io/mig.config.applied") == name,
        90,
        f"{node}: success for {name}",
    )


def target(point: str) -> str:
    """The config the node is given at that point (the one it must end in `success` with)."""
    return "all-2g.20gb" if point == "pending" else "all-1g.10gb"


def _recovered(api: ApiClient, node: str, config: str, limit: float) -> float | None:
    """When the node reads `success` for `config` with its clients' deploy labels restored."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            got, applied = labels(api, node), annotations(api, node).get("migops.io/mig.config.applied")
        except Exception:  # noqa: BLE001 - the server is still starting to answer this client
            got, applied = {}, None
        if got.get("nvidia.com/mig.config.state") == "success" and applied == config:
            if all(got.get(k) == v for k, v in DEPLOY.items()):
                return time.monotonic()
        time.sleep(0.05)
    return None
