"""How a suggestion is shown: text for a person (and the commit message), the suggest/v1 document."""

from __future__ import annotations

from collections import Counter
from typing import Any

from migops.mig.text import listed
from migops.suggest.model import Demand
from migops.suggest.run import Outcome

_SHOWN = 5


def _profiles(demands: list[Demand]) -> str:
    counts = Counter(", ".join(sorted(d.profiles)) for d in demands)
    return ", ".join(f"{p}: {n}" for p, n in sorted(counts.items()))


def summary(out: Outcome) -> str:
    """One line: the commit's subject."""
    p = out.proposal
    if p is None:
        return "no pending MIG demand"
    if not p.changes:
        return f"no change proposed ({len(p.placed)} of {p.demand} pending pods can be served as it is)"
    nodes = len(p.changes)
    return (
        f"serve {len(p.placed)} of {p.demand} pending MIG pods: {nodes} node{'s' if nodes != 1 else ''}, "
        f"{p.gpus} GPU{'s' if p.gpus != 1 else ''} reconfigured"
    )


def text(out: Outcome) -> list[str]:
    lines = [summary(out)]
    p = out.proposal
    if p is None:
        lines.append(f"No pending pod asks for MIG devices (strategy {out.strategy}); nothing to propose.")
    else:
        lines.append(
            f"Pending MIG demand: {p.demand} pods ({_profiles([*(x.demand for x in p.placed), *(u.demand for u in p.unserved)])})."
        )
        if p.new_configs:
            lines.append("")
            lines.append(f"New configs in {out.spec.file('config.yaml')} (no existing config offers these profiles):")
            for name in sorted(p.new_configs):
                lines.append(f"  {name}")
        if p.changes:
            lines.append("")
            lines.append(f"Changes to {out.spec.file('nodes.yaml')}:")
            for c in p.changes:
                o = c.option
                gpus = ", ".join(str(g) for g in o.gpus) or "none"
                lines.append(
                    f"  {c.node}: {c.current or '(no config)'} -> {c.config}  (GPUs reconfigured: {gpus}; "
                    f"instances kept {o.kept}, destroyed {o.destroyed}, created {o.created})"
                )
        if p.placed:
            lines.append("")
            lines.append(
                "Served once applied:" if p.changes else "Served by nodes.yaml as it stands (its rollout included):"
            )
            by: dict[tuple[str, str], list[str]] = {}
            for x in p.placed:
                by.setdefault((x.profile, x.node), []).append(x.demand.ref)
            for (profile, node), refs in sorted(by.items()):
                lines.append(f"  {profile} on {node}: {len(refs)} ({listed(refs, _SHOWN)})")
        if p.unserved:
            lines.append("")
            lines.append("Not served:")
            for u in p.unserved:
                lines.append(f"  {u.demand.ref} ({', '.join(sorted(u.demand.profiles))}): {u.reason}")
        solved = "optimal" if p.optimal else "best found within the time limit"
        gaps = "; ".join(f"{s.name} {s.value} (bound {s.bound})" for s in p.stages if not s.optimal)
        lines.append("")
        lines.append(f"Solver: {solved} in {p.seconds:.2f} s" + (f"; gap: {gaps}" if gaps else ""))
    for s in out.skipped:
        lines.append(f"skipped {s.ref}: {s.reason}")
    if out.comments_lost:
        lines.append("note: nodes.yaml could not be edited in place; it is written anew (its comments are lost)")
    for w in out.warnings:
        lines.append(f"warning: {w}")
    return lines


def as_dict(out: Outcome) -> dict[str, Any]:
    p = out.proposal
    doc: dict[str, Any] = {
        "outcome": "no-demand" if p is None else ("proposal" if p.changes else "no-change"),
        "revision": out.spec.revision,
        "path": out.spec.path,
        "strategy": out.strategy,
        "summary": summary(out),
        "demand": [
            {"pod": d.ref, "profiles": sorted(d.profiles), "count": d.count, "priority": d.priority}
            for d in out.demands
        ],
        "changes": [],
        "served": [],
        "unserved": [],
        "skipped": [{"ref": s.ref, "reason": s.reason} for s in out.skipped],
        "patch": out.patch(),
        "newConfigs": dict(sorted(p.new_configs.items())) if p is not None else {},
        "warnings": [w.as_dict() for w in out.warnings],
    }
    if p is not None:
        doc["changes"] = [
            {
                "node": c.node,
                "from": c.current,
                "to": c.config,
                "newConfig": c.option.new,
                "gpus": list(c.option.gpus),
                "instances": {"kept": c.option.kept, "destroyed": c.option.destroyed, "created": c.option.created},
            }
            for c in p.changes
        ]
        doc["served"] = [{"pod": x.demand.ref, "node": x.node, "profile": x.profile} for x in p.placed]
        doc["unserved"] = [{"pod": u.demand.ref, "reason": u.reason} for u in p.unserved]
        doc["solver"] = {
            "optimal": p.optimal,
            "seconds": round(p.seconds, 3),
            "stages": [
                {"name": s.name, "value": s.value, "bound": s.bound, "optimal": s.optimal, "gap": s.gap}
                for s in p.stages
            ],
        }
    return doc
