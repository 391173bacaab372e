"""Prometheus metrics of one reconciler (its own registry: two reconcilers in one process stay apart).

Names follow the conventions controller-runtime uses (`*_total` counters, `*_seconds` histograms).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.reconciles = Counter(
            "migops_reconcile",
            "Syncs, by outcome (Applied, InSync, Progressing, "
            "Invalid, Unverified, Unreachable, ApplyFailed, Halted, Suspended)",
            ["outcome"],
            registry=r,
        )
        self.duration = Histogram(
            "migops_reconcile_duration_seconds",
            "Time of one sync (fetch, plan, writes)",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.fetch_duration = Histogram(
            "migops_source_fetch_duration_seconds",
            "Time of one git fetch",
            registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.requests = Counter(
            "migops_api_writes",
            "Writes sent to the API server, by resource and result (ok, retry, error) and HTTP status",
            ["resource", "result", "code"],
            registry=r,
        )
        self.nodes = Gauge("migops_nodes", "Managed nodes by phase", ["phase"], registry=r)
        self.past_deadline = Gauge(
            "migops_nodes_past_progress_deadline",
            "Managed nodes reconfiguring for longer than rollout.progressDeadlineSeconds",
            registry=r,
        )
        self.revision = Gauge(
            "migops_applied_revision_info", "The last applied revision (value 1)", ["revision"], registry=r
        )
        self.leader = Gauge("migops_leader", "1 while this replica holds the Lease", registry=r)
        self.hooks = Counter("migops_hook_requests", "POST /hook requests, by result", ["result"], registry=r)
        self.events = Counter("migops_events", "Events recorded, by reason", ["reason"], registry=r)
        self.pending_mig = Gauge(
            "migops_pending_mig_requests",
            "MIG devices pending pods ask for, by profile (MigSync spec.suggest; docs/suggest.md)",
            ["profile"],
            registry=r,
        )

    def count_write(self, resource: str, result: str, status: int | None) -> None:
        self.requests.labels(resource, result, str(status or "")).inc()

    def writes(self, resource: str | None = None) -> int:
        """Successful writes so far (all resources, or one): what the benchmarks read."""
        total = 0.0
        for metric in self.requests.collect():
            for sample in metric.samples:
                if (
                    sample.name.endswith("_total")
                    and sample.labels.get("result") == "ok"
                    and (resource is None or sample.labels.get("resource") == resource)
                ):
                    total += sample.value
        return int(total)

    def set_revision(self, revision: str) -> None:
        self.revision.clear()
        self.revision.labels(revision).set(1)
