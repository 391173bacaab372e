"""The monitoring component's alerts ask for metrics, labels and label values the code really exports.

Every `migops_*` selector in manifests/overlays/components/monitoring/prometheusrule.yaml is checked
against the webhook's and the reconciler's registries (names by type, label names, and the values the
code can give `outcome`, `phase` and `result`). The kube-apiserver metric and its webhook labels are
checked against a real API server in test_deploy_overlays.py. No PromQL parser runs here (promtool is
not available): the expressions' syntax is not checked beyond this.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from deploy_helpers import OVERLAYS
from prometheus_client import Counter, Gauge, Histogram

import migops.webhook.metrics as webhook_metrics
from migops.api.migsync import NodePhase
from migops.reconciler.metrics import Metrics
from migops.reconciler.reasons import SyncOutcome

RULES = OVERLAYS / "components" / "monitoring" / "prometheusrule.yaml"
SELECTOR = re.compile(r"\b(migops_[a-z0-9_]+)\s*(\{[^}]*\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def _exported() -> dict[str, tuple[set[str], Any]]:
    """Sample name -> (label names, metric object), as /metrics shows them."""
    metrics: list[Any] = [
        webhook_metrics.REQUESTS,
        webhook_metrics.DENIALS,
        webhook_metrics.LATENCY,
        webhook_metrics.CACHE,
    ]
    reconciler = Metrics()
    metrics += [
        reconciler.reconciles,
        reconciler.duration,
        reconciler.fetch_duration,
        reconciler.requests,
        reconciler.nodes,
        reconciler.revision,
        reconciler.leader,
        reconciler.hooks,
        reconciler.events,
    ]
    out: dict[str, tuple[set[str], Any]] = {}
    for metric in metrics:
        (family,) = metric.describe()
        labels = set(metric._labelnames)
        if isinstance(metric, Counter):
            names = [f"{family.name}_total"]
        elif isinstance(metric, Histogram):
            names = [f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"]
            labels = labels | {"le"}
        else:
            assert isinstance(metric, Gauge)
            names = [family.name]
        for name in names:
            out[name] = (labels, metric)
    return out


# The values the code gives these labels.
KNOWN_VALUES = {
    ("migops_reconcile_total", "outcome"): set(SyncOutcome),
    ("migops_nodes", "phase"): set(NodePhase),
    ("migops_api_writes_total", "result"): {"ok", "retry", "error"},
}


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    assert doc["kind"] == "PrometheusRule"
    return [rule for group in doc["spec"]["groups"] for rule in group["rules"]]


def test_the_alerts_cover_what_the_issue_names() -> None:
    names = {rule["alert"] for rule in _rules()}
    assert {"MigopsWebhookDown", "MigopsWebhookDenialsHigh", "MigopsReconcilerStalled", "MigopsNodeMigFailed"} <= names
    for rule in _rules():
        assert rule["labels"]["severity"] in ("critical", "warning") and rule["annotations"]["summary"]


def test_every_migops_selector_names_an_exported_metric_and_real_labels() -> None:
    exported = _exported()
    seen = set()
    for rule in _rules():
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")"), rule["alert"]
        selected = [name for name, _ in SELECTOR.findall(expr)]
        for name, braces in SELECTOR.findall(expr):
            assert name in exported, f"{rule['alert']}: {name} is not exported (have {sorted(exported)})"
            seen.add(name)
            labels, _ = exported[name]
            for label, op, value in MATCHER.findall(braces or ""):
                assert label in labels, f"{rule['alert']}: {name} has no label {label}"
                known = KNOWN_VALUES.get((name, label))
                if known is not None:
                    values = value.split("|") if op in ("=~", "!~") else [value]
                    assert set(values) <= known, f"{rule['alert']}: {name}{{{label}}} is never {set(values) - known}"
        for by in re.findall(r"\bby\s*\(([^)]*)\)", expr) if selected else ():
            for label in (x.strip() for x in by.split(",")):
                # Prometheus adds namespace/job/pod from the scrape target; histogram_quantile needs le.
                assert label in {"namespace", "job", "pod", "le"} or any(label in exported[n][0] for n in selected), (
                    f"{rule['alert']}: by ({label}) is no label of {selected}"
                )
    assert {"migops_webhook_denials_total", "migops_reconcile_total", "migops_nodes", "migops_leader"} <= seen


def test_the_component_renders_and_scrapes_real_ports(rendered) -> None:
    docs = rendered("monitoring")
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == [
        ("PrometheusRule", "migops"),
        ("ServiceMonitor", "migops-reconciler"),
        ("ServiceMonitor", "migops-webhook"),
    ]
    services = {d["metadata"]["name"]: d for d in rendered("base") if d["kind"] == "Service"}
    for monitor in (d for d in docs if d["kind"] == "ServiceMonitor"):
        (service,) = [
            s
            for s in services.values()
            if s["metadata"]["labels"].items() >= monitor["spec"]["selector"]["matchLabels"].items()
        ]
        ports = {p["name"] for p in service["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports, monitor["metadata"]["name"]
    webhook = next(d for d in docs if d["metadata"]["name"] == "migops-webhook")
    # The scrape verifies the serving certificate by the Service name it is issued for.
    assert webhook["spec"]["endpoints"][0]["tlsConfig"]["serverName"] == "migops-webhook.migops-system.svc"
