"""Prometheus metrics of one agent (its own registry), served on `--metrics-address` when given.

The node's state stays on the Node (labels, annotations, Events); these count what a dashboard or an
alert needs over time: drift checks, drift found, repairs.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.checks = Counter(
            "migops_agent_drift_checks", "Drift checks (the GPUs read and compared with the applied config)", registry=r
        )
        self.check_seconds = Histogram(
            "migops_agent_drift_check_seconds",
            "Time of one drift check",
            registry=r,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 0.5, 1),
        )
        self.detected = Counter(
            "migops_agent_drift_detected",
            "New drift found on a GPU (each change of what differs counts once)",
            ["gpu"],
            registry=r,
        )
        self.drifted = Gauge(
            "migops_agent_drifted_gpus", "GPUs whose MIG geometry differs from the applied config now", registry=r
        )
        self.repairs = Counter(
            "migops_agent_drift_repairs",
            "Drift repairs, by result (success, failed, held: "
            "not attempted because drift recurred too often, report: --drift=report)",
            ["result"],
            registry=r,
        )

    def value(self, name: str, **labels: str) -> float:
        """A sample's value (tests read them)."""
        for metric in self.registry.collect():
            for sample in metric.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0


def serve(metrics: AgentMetrics, address: str):  # noqa: ANN201
    """Serve /metrics on `HOST:PORT` (`:9400` = every address); returns the server (call .shutdown())."""
    from prometheus_client import start_http_server

    host, _, port = address.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host or "0.0.0.0", registry=metrics.registry)
    return server
