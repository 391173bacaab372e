"""How a suggestion is shown: text for a person (and the commit message), the suggest/v1 document."""

from __future__ import annotations

from collections import Counter
from typing import Any

from migops.mig.text import listed
from migops.suggest.model import Demand, Proposal
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


def _changes(out: Outcome, p: Proposal) -> list[str]:
    lines = []
    if p.new_configs:
        lines += ["", f"New configs in {out.spec.file('config.yaml')} (no existing config offers these profiles):"]
        lines += [f"  {name}" for name in sorted(p.new_configs)]
    if p.changes:
        lines += ["", f"Changes to {out.spec.file('nodes.yaml')}:"]
        for c in p.changes:
            o = c.option
            gpus = ", ".join(str(g) for g in o.gpus) or "none"
            lines.append(
                f"  {c.node}: {c.current or '(no config)'} -> {c.config}  (GPUs reconfigured: {gpus}; "
                f"instances kept {o.kept}, destroyed {o.destroyed}, created {o.created})"
            )
    return lines


def _served(p: Proposal) -> list[str]:
    lines = []
    if p.placed:
        lines += [
            "",
            "Served once applied:" if p.changes else "Served by nodes.yaml as it stands (its rollout included):",
        ]
        by: dict[tuple[str, str], list[str]] = {}
        for x in p.placed:
            by.setdefault((x.profile, x.node), []).append(x.demand.ref)
        lines += [
            f"  {profile} on {node}: {len(refs)} ({listed(refs, _SHOWN)})"
            for (profile, node), refs in sorted(by.items())
        ]
    if p.unserved:
        lines += ["", "Not served:"]
        lines += [f"  {u.demand.ref} ({', '.join(sorted(u.demand.profiles))}): {u.reason}" for u in p.unserved]
    return lines


def _solver(p: Proposal) -> list[str]:
    solved = "optimal" if p.optimal else "best found within the work limit"
    gaps = "; ".join(f"{s.name} {s.value} (bound {s.bound})" for s in p.stages if not s.optimal)
    lines = ["", f"Solver: {solved} in {p.seconds:.2f} s" + (f"; gap: {gaps}" if gaps else "")]
    cut = [s.name for s in p.stages if s.wall_clock_cut]
    if cut:
        lines.append(
            f"note: the wall-clock limit (--time-limit) cut {', '.join(cut)} before its work limit: "
            "a rerun may propose otherwise"
        )
    return lines


def text(out: Outcome) -> list[str]:
    lines = [summary(out)]
    p = out.proposal
    if p is None:
        lines.append(f"No pending pod asks for MIG devices (strategy {out.strategy}); nothing to propose.")
    else:
        demand = [*(x.demand for x in p.placed), *(u.demand for u in p.unserved)]
        lines.append(f"Pending MIG demand: {p.demand} pods ({_profiles(demand)}).")
        lines += _changes(out, p) + _served(p) + _solver(p)
    lines += [f"skipped {s.ref}: {s.reason}" for s in out.skipped]
    lines += [f"note: {n.ref}: {n.reason}" for n in out.notes]
    if out.capped:
        lines.append(f"note: {out.capped}")
    if out.comments_lost:
        lines.append("note: nodes.yaml could not be edited in place; it is written anew (its comments are lost)")
    lines += [f"warning: {w}" for w in out.warnings]
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
        "notes": [{"ref": n.ref, "reason": n.reason} for n in out.notes],
        "commentsLost": out.comments_lost,
    }
    if out.capped:
        doc["capped"] = out.capped
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
        doc["unserved"] = [{"pod": u.demand.ref, "reason": u.reason, "rule": u.rule.value} for u in p.unserved]
        doc["solver"] = {
            "optimal": p.optimal,
            "seconds": round(p.seconds, 3),
            "stages": [
                {
                    "name": s.name,
                    "value": s.value,
                    "bound": s.bound,
                    "optimal": s.optimal,
                    "gap": s.gap,
                    "wallClockCut": s.wall_clock_cut,
                }
                for s in p.stages
            ],
        }
    return doc
