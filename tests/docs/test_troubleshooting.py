"""docs/troubleshooting.md is rendered from the reasons and rules the code declares, and every reason and
rule ID the code can emit has an entry there (what it means, what to do).

Reasons are enums (reconciler, gitops, agent): each member needs its entry. Rule IDs are strings handed to
the constructors of findings; they are found in the source with `ast`: the rule argument of Problem,
_Finding, Finding, _fail and the spec reader's error/note, a parameter named `rule`'s default, mig's
(rule, message, severity) tuples, and the webhook's (rule, text) and (rule, where, text) tuples. A new
rule without an entry fails here: add its Explanation beside the others (mig/rules.py, gitops/reasons.py,
webhook/denials.py), then `make troubleshooting`."""

from __future__ import annotations

import ast
import importlib.util
import re
from collections import defaultdict
from pathlib import Path

from migops.agent.reasons import AGENT_EVENTS, AgentEvent
from migops.gitops.reasons import FLEET_RULES, NODES_RULES, SOURCE_REASONS, SourceReason
from migops.mig.rules import MIG_RULES
from migops.reconciler.reasons import RECONCILER_REASONS, Reason
from migops.webhook.denials import WEBHOOK_RULES

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("mig", "api", "kube", "logs", "certs", "webhook", "gitops", "reconciler", "agent", "suggest", "migops")
RULE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
# Callables that take a rule ID, and the position of it, per folder where they make findings.
MAKERS = {
    "mig": {"Problem": 1, "_Finding": 1, "Finding": 0, "_fail": 0, "error": 1, "note": 2},
    "gitops": {"Problem": 1},
    "webhook": {"Problem": 1},
    "migops": {"Problem": 1},
}
CATALOGUES = {
    "mig/rules.py MIG_RULES": MIG_RULES,
    "gitops/reasons.py NODES_RULES": NODES_RULES,
    "gitops/reasons.py FLEET_RULES": FLEET_RULES,
    "webhook/denials.py WEBHOOK_RULES": WEBHOOK_RULES,
}

_spec = importlib.util.spec_from_file_location("troubleshooting", ROOT / "hack" / "troubleshooting.py")
troubleshooting = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(troubleshooting)  # type: ignore[union-attr]


def _text(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _templated(tree: ast.AST, makers: dict[str, int]) -> set[str]:
    """Rules made as f"PREFIX{key.lower()}" in a helper: each constant key a call of the helper passes."""
    found: set[str] = set()
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        params = [a.arg for a in fn.args.args]
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call) and _callee(n) in makers):
            at = makers[_callee(call)]
            rule = call.args[at] if len(call.args) > at else None
            if not isinstance(rule, ast.JoinedStr) or len(rule.values) != 2:
                continue
            prefix, value = rule.values
            inner = value.value if isinstance(value, ast.FormattedValue) else None
            if _text(prefix) is None or not (isinstance(inner, ast.Call) and _callee(inner) == "lower"):
                continue
            base = inner.func.value if isinstance(inner.func, ast.Attribute) else None
            if not isinstance(base, ast.Name) or base.id not in params:
                continue
            index = params.index(base.id)
            for use in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and _callee(n) == fn.name):
                given = use.args[index] if len(use.args) > index else None
                given = given or next((k.value for k in use.keywords if k.arg == base.id), None)
                if given is not None and _text(given) is not None:
                    found.add(f"{_text(prefix)}{_text(given).lower()}")  # type: ignore[union-attr]
    return found


def _rules_in(folder: str, tree: ast.AST) -> set[str]:
    parents = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    makers = MAKERS.get(folder, {})
    found: set[str] = _templated(tree, makers)
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            at = makers.get(_callee(n))
            if at is not None and len(n.args) > at:
                found.add(_text(n.args[at]) or "")
            found.update(_text(k.value) or "" for k in n.keywords if k.arg == "rule")
        elif isinstance(n, ast.arguments):
            names = [a.arg for a in n.args + n.kwonlyargs]
            defaults = [None] * (len(n.args) - len(n.defaults)) + list(n.defaults) + n.kw_defaults
            found.update(_text(d) or "" for a, d in zip(names, defaults, strict=True) if a == "rule" and d)
        elif isinstance(n, ast.Tuple) and n.elts and _text(n.elts[0]) is not None:
            first, last, parent = _text(n.elts[0]), n.elts[-1], parents.get(id(n))
            if folder == "mig" and len(n.elts) == 3 and _text(last) in ("error", "warning"):
                found.add(first or "")
            in_list = isinstance(parent, (ast.List, ast.ListComp, ast.GeneratorExp))
            appended = isinstance(parent, ast.Call) and _callee(parent) == "append"
            message = isinstance(last, (ast.JoinedStr, ast.Constant, ast.BinOp))
            if folder == "webhook" and len(n.elts) in (2, 3) and (in_list or appended) and message:
                found.add(first or "")
    return {r for r in found if RULE.fullmatch(r)}


def emitted_rules() -> dict[str, set[str]]:
    """Rule ID -> the files that emit it."""
    where: dict[str, set[str]] = defaultdict(set)
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            for rule in _rules_in(folder, ast.parse(path.read_text())):
                where[rule].add(str(path.relative_to(ROOT)))
    return where


def test_the_page_is_what_the_declarations_render() -> None:
    assert (ROOT / "docs" / "troubleshooting.md").read_text() == troubleshooting.render(), (
        "docs/troubleshooting.md is stale: run `make troubleshooting`"
    )


def test_every_reason_has_an_entry() -> None:
    for enum, entries in ((Reason, RECONCILER_REASONS), (SourceReason, SOURCE_REASONS), (AgentEvent, AGENT_EVENTS)):
        missing = [m.value for m in enum if m not in entries]
        assert missing == [], f"{enum.__name__} members without an Explanation: {missing}"


def test_every_rule_the_code_emits_has_one_entry_and_every_entry_is_emitted() -> None:
    emitted = emitted_rules()
    assert len(emitted) >= 100, "the search for rule IDs finds too few: has the way findings are made changed?"
    declared: dict[str, list[str]] = defaultdict(list)
    for file, entries in CATALOGUES.items():
        for rule in entries:
            declared[rule].append(file)
    twice = {r: files for r, files in declared.items() if len(files) > 1}
    assert twice == {}, "a rule is declared in one catalogue only (its text covers each place)"
    missing = {r: sorted(files) for r, files in emitted.items() if r not in declared}
    assert missing == {}, "rules without an Explanation (mig/rules.py, gitops/reasons.py, webhook/denials.py)"
    stale = sorted(set(declared) - set(emitted))
    assert stale == [], "declared rules no code emits: remove them, or teach emitted_rules() where they come from"


def test_the_search_finds_each_kind_of_finding() -> None:
    """Each way a rule is made is seen: a call, a parameter's default, mig's and the webhook's tuples."""
    emitted = emitted_rules()
    for rule, file in (
        ("unknown-profile", "mig/validate.py"),  # _Finding(path, rule, ...)
        ("yaml-syntax", "mig/yamlsafe.py"),  # _fail(rule, ...)
        ("yaml-reading", "mig/spec.py"),  # def note(..., rule="yaml-reading")
        ("device-filter-syntax", "mig/validate.py"),  # (rule, message, severity)
        ("dra-selector-error", "mig/dra.py"),  # Finding(rule, ...)
        ("selectors-overlap", "gitops/desired.py"),  # Problem(path, rule, ...)
        ("revision", "webhook/nodelabels.py"),  # findings.append((rule, text))
        ("strategy-mismatch", "webhook/policies.py"),  # [(rule, text) for ...]
        ("invalid-maxnodes", "gitops/repo.py"),  # Problem(path, f"invalid-{key.lower()}", ...) in a helper
    ):
        assert file in emitted.get(rule, set()), (rule, file)


def test_every_explanation_says_what_and_what_to_do() -> None:
    every = [*RECONCILER_REASONS.items(), *SOURCE_REASONS.items(), *AGENT_EVENTS.items()]
    for entries in CATALOGUES.values():
        every += entries.items()
    for name, explained in every:
        for text in (explained.meaning, explained.action):
            assert text.strip() and text.rstrip().endswith((".", ")")), (name, text)


def test_the_agent_records_only_declared_reasons() -> None:
    literal = []
    for path in sorted((ROOT / "agent").rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Call) and _callee(n) == "event" and len(n.args) > 1 and _text(n.args[1]) is not None:
                literal.append(f"{path.relative_to(ROOT)}:{n.lineno}: {_text(n.args[1])}")
    assert literal == [], "an Event reason of the agent is an AgentEvent member (agent/reasons.py)"


def test_config_rules_doc_names_only_rules_that_exist() -> None:
    """The rule tables of docs/config-rules.md name rules the code has (their first column)."""
    known = {rule for entries in CATALOGUES.values() for rule in entries}
    text = (ROOT / "docs" / "config-rules.md").read_text()
    named = set()
    for line in text.splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2:
            first = cells[2] if cells[1].strip().isdigit() else cells[1]
            named.update(re.findall(r"`([a-z][a-z0-9]*(?:-[a-z0-9]+)+)`", first))
    assert len(named) >= 40
    assert sorted(named - known) == []
