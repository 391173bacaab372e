"""One text, one verdict: the webhook, gitops' desired state (what the reconciler
applies) and `migops validate` say the same about the same config on the same node.

The corpus: every input of the conformance corpus (tests/mig/conformance) that migops reads as a bare
config, plus tests/verdicts/multi_model.yaml (entries for several models, the `3g.45gb` case of the
issue among them), each config on four node kinds (8 x H100, 8 x A100, an A100 whose GPU count GFD does
not tell, a node with one of each). Each decider is called as production calls it (deciders.py); they
must agree on accepted/denied and on the rules of the errors. A private copy of a rule in any of them
(the webhook's old "keep the errors that name the model" filter, gitops' old "any catalogue error
fails the node") makes them disagree on some case of this corpus: the last test proves the comparison
catches exactly such a copy.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from deciders import DECIDERS, NODE_KINDS, Answer, Case, cli, disagreements, gitops, texts, webhook_configmap

from migops.webhook import checks

STRATEGIES_MULTI = ("mixed", "single")


def _cases(tmp: Path, everything: bool) -> list[Case]:
    cases = []
    for source, text, path, names in texts(tmp):
        multi = source == "multi_model.yaml"
        chosen = names if multi or everything else list(dict.fromkeys([names[0], names[len(names) // 2], names[-1]]))
        for strategy in STRATEGIES_MULTI if multi else ("mixed",):
            for name in chosen:
                for kind in NODE_KINDS:
                    cases.append(Case(source, text, path, name, kind, strategy))
    return cases


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> list[Case]:
    return _cases(tmp_path_factory.mktemp("verdicts"), everything=True)


# Slow on purpose (40-75 s in make test, CPU-bound): every config of the corpus on every node kind, each
# asked of all three deciders. A sample would miss the one config where they part ways.
def test_webhook_gitops_and_the_cli_agree_on_the_corpus(cases: list[Case]) -> None:
    wrong: list[str] = []
    denied: Counter[str] = Counter()
    compared = Counter()
    for case in cases:
        answers, lines = disagreements(case)
        wrong += lines
        compared[len(answers)] += 1
        for rule in next(iter(answers.values())).rules:
            denied[rule] += 1
    assert not wrong, f"{len(wrong)} disagreements, first ones:\n" + "\n".join(wrong[:15])
    # Not vacuous: thousands of questions, all three deciders on the exact nodes, and denials of many kinds.
    assert len(cases) > 2500 and compared[3] > 1900 and compared[2] > 600, compared
    assert {
        "unknown-profile",
        "gpu-not-covered",
        "count-exceeds-max",
        "strategy-mismatch",
        "does-not-fit-model",
        "duplicate-device-index",
        "mig-not-capable",
        "placement-infeasible",
    } <= set(denied), denied
    print(
        f"\n{len(cases)} questions; deciders compared per question: {dict(compared)}; "
        f"denials by rule: {dict(denied.most_common())}"
    )


def _by(cases: list[Case], name: str, kind: str, strategy: str = "mixed") -> Case:
    return next(
        c
        for c in cases
        if c.source == "multi_model.yaml" and c.name == name and c.kind == kind and c.strategy == strategy
    )


def test_an_unknown_profile_in_another_models_entry_is_denied_everywhere(cases: list[Case]) -> None:
    """The issue's case: "3g.45gb" in the H100 entry of a config an A100 node uses."""
    for kind in NODE_KINDS:
        answers, wrong = disagreements(_by(cases, "a100-with-h100-typo", kind))
        assert not wrong
        assert all(not a.accepted and "unknown-profile" in a.rules for a in answers.values()), (kind, answers)
    # ... and the corrected text is accepted on both models (what is not an error of the text never
    # fails a node), while an unfiltered config that fits H100 only is refused on the A100 node alone.
    for kind in NODE_KINDS:
        answers, _ = disagreements(_by(cases, "a100-and-h100", kind))
        assert all(a.accepted for a in answers.values()), (kind, answers)
    assert all(a.accepted for a in disagreements(_by(cases, "unfiltered-h100-sized", "8xH100"))[0].values())
    for kind in ("8xA100", "A100 (GFD single: model only)"):  # A100 40GB allows 4 x 1g.10gb, not 7
        refused = disagreements(_by(cases, "unfiltered-h100-sized", kind))[0]
        assert all(not a.accepted and "count-exceeds-max" in a.rules for a in refused.values()), refused


def test_the_configmap_rule_is_the_node_rule_and_the_catalogue_rule(cases: list[Case]) -> None:
    """The ConfigMap in force rewritten: the config the node selects judged on the node, every other
    config of the file against the catalogue, as `migops validate` without --gpu judges it."""
    wrong = []
    chosen = [c for c in cases if c.source == "multi_model.yaml" or c.kind == "8xA100"][:1500]
    catalogue: dict[tuple[str, str], Answer] = {}
    for case in chosen:
        expected = set(gitops(case).rules)
        for other in {c.name for c in chosen if c.text == case.text} - {case.name}:
            key = (case.text, other)
            if key not in catalogue:
                catalogue[key] = cli(
                    Case(case.source, case.text, case.path, other, case.kind, case.strategy), on_node=False
                )  # type: ignore[assignment]
            expected |= catalogue[key].rules
        found = webhook_configmap(case)
        if found.rules != expected or found.accepted != (not expected):
            wrong.append(f"{case.source}: {case.name} on {case.kind}: ConfigMap {found}, expected {sorted(expected)}")
    assert not wrong, "\n".join(wrong[:15])


def _private_copy(case: Case) -> Answer:
    """The webhook's Node rule as it was before migops.mig.fit: node mode only, no error of the text."""
    from migops.api.objects import node_gpus
    from migops.mig.spec import parse_config

    gpus = node_gpus(case.node(False))
    if gpus is None or not gpus.exact:
        return gitops(case)
    report = checks.on_node(parse_config(case.text), case.name, gpus.gpus, case.strategy)  # type: ignore[arg-type]
    return Answer(report.valid, frozenset(p.rule for p in report.errors))


def test_a_private_copy_of_a_rule_is_caught(cases: list[Case]) -> None:
    deciders = {**DECIDERS, "webhook (Node label)": _private_copy}
    multi = [c for c in cases if c.source == "multi_model.yaml"]
    wrong = [line for c in multi for line in disagreements(c, deciders)[1]]
    assert any("a100-with-h100-typo" in line and "8xA100" in line for line in wrong), wrong
