"""Does config X fit these GPUs, and what do they advertise: the one answer to that question.

The webhook (ConfigMaps, Node labels, ClusterPolicy switches), gitops' desired state (so the
reconciler) and `migops validate` all ask it here, so one text gets one verdict. Three questions:

- **catalogue** (`gpus` None): the config on every GPU model its entries can apply to
  (`validate_against_catalogue`): what `migops validate` without `--gpu` answers;
- **node** (`NodeGpus.exact`): on these GPUs in index order (`validate_on_node`);
- **model** (the model is known, not the count: GFD under the single strategy): on a node of that
  model as the catalogue sizes it (`validate_on_model`).

The rule (docs/config-rules.md, "One verdict"): a node or model question is answered by its own
report **plus the errors of the text itself** -- the catalogue errors, which hold whatever node uses
the config. An entry whose device-filter names a model has to be valid on that model: `"3g.45gb"` in
an H100 entry is `unknown-profile` for an A100 node's question too (the file is wrong, and the next
H100 node to select it would fail). What is not an error of the text never fails a node: an
unfiltered config that fits some models but not others has no catalogue error, and only the node's
(or model's) own report decides. When an unfiltered config fits no model at all, the catalogue's
"closest models" findings explain that for other GPUs; a node's question takes only `fits-no-gpu`
from them, and only when its own report has no error (it has, in practice: what fits no model fits
no node); its own report says why on its GPUs. Duplicates (the same path and rule already in the
node's report) are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from migops.mig.catalogue import GpuModel
from migops.mig.gcpause import paused_gc
from migops.mig.gfd import Advertisement, NodeGpus, advertise
from migops.mig.problems import Problem, key_path
from migops.mig.spec import MigConfigEntry, MigPartedConfig
from migops.mig.validate import (
    ConfigReport,
    Strategy,
    Validation,
    validate_against_catalogue,
    validate_on_model,
    validate_on_node,
)

__all__ = ["DIRECT", "Fit", "NodeGpus", "Reports", "combine", "fit", "fit_all", "needs_catalogue", "text_errors"]


@dataclass(frozen=True)
class Reports:
    """Where the validator's reports come from: directly (the default), or memoised (the webhook's
    `checks`, gitops' cache). Only reports come from here; `combine` decides."""

    catalogue: Callable[[MigPartedConfig, str, Strategy | None], ConfigReport] = validate_against_catalogue
    node: Callable[[MigPartedConfig, str, Sequence[GpuModel], Strategy | None], ConfigReport] = validate_on_node
    model: Callable[[MigPartedConfig, str, GpuModel, Strategy | None], ConfigReport] = validate_on_model


DIRECT = Reports()


@dataclass(frozen=True)
class Fit:
    """The verdict on one config for one question."""

    report: ConfigReport  # problems (errors and warnings) of this question; gpus (node); fits
    gpus: NodeGpus | None  # the question: None for the catalogue
    strategy: Strategy | None

    @property
    def name(self) -> str:
        return self.report.name

    @property
    def valid(self) -> bool:
        return self.report.valid

    @property
    def problems(self) -> tuple[Problem, ...]:
        return self.report.problems

    @property
    def errors(self) -> tuple[Problem, ...]:
        return self.report.errors

    @property
    def rules(self) -> frozenset[str]:
        """The rules of the errors: what a denial names."""
        return frozenset(p.rule for p in self.report.errors)

    def advertisement(self) -> Advertisement | None:
        """What GFD and the device plugin publish once it is applied (a valid node question with a
        strategy); None otherwise."""
        if self.gpus is None or not self.gpus.exact or not self.valid or self.strategy is None:
            return None
        return advertise(self.report.gpus, self.strategy)


def text_errors(catalogue: ConfigReport, question: ConfigReport | None = None) -> tuple[Problem, ...]:
    """The catalogue errors that hold for every node (see the module's rule): all of them, except
    when an unfiltered config fits no model at all; then its findings explain that on the closest
    models, and a question with errors of its own (it has them: no model fits) needs none of them.
    That holds when `fits-no-gpu` is past the report's limit too (MAX_PROBLEMS): a question that fails
    does not take the closest models' findings then either."""
    errors = catalogue.errors
    if not catalogue.fits_no_gpu:
        return errors
    if question is not None and not question.valid:
        return ()
    return tuple(p for p in errors if p.rule == "fits-no-gpu") or errors


def combine(catalogue: ConfigReport, question: ConfigReport | None, gpus: NodeGpus | None) -> ConfigReport:
    """The rule itself, pure: the question's report plus the text's errors (module docstring)."""
    if question is None:
        return catalogue
    problems = list(question.problems)
    seen = {(p.path, p.rule) for p in problems}
    problems += [p for p in text_errors(catalogue, question) if (p.path, p.rule) not in seen]
    fits = question.fits
    if gpus is not None and not gpus.exact and gpus.gpus[0].mig_capable:
        model = gpus.gpus[0]
        if model not in fits and not any(p.severity == "error" for p in problems):
            # A filtered config whose entries name other models only: nothing on this model to judge.
            problems.append(
                Problem(
                    key_path("mig-configs", question.name),
                    "does-not-fit-model",
                    f"no entry of the config selects {model.name} (its device-filters name other GPUs)",
                )
            )
    return ConfigReport(question.name, tuple(problems), gpus=question.gpus, fits=fits)


def _question(
    config: MigPartedConfig, name: str, gpus: NodeGpus, strategy: Strategy | None, reports: Reports
) -> ConfigReport:
    if gpus.exact:
        return reports.node(config, name, gpus.gpus, strategy)
    model = gpus.gpus[0]
    if not model.mig_capable:  # no MIG: one such GPU shows what any number of them would
        return reports.node(config, name, (model,), strategy)
    return reports.model(config, name, model, strategy)


def fit(
    config: MigPartedConfig,
    name: str,
    gpus: NodeGpus | None,
    strategy: Strategy | None = None,
    reports: Reports = DIRECT,
) -> Fit:
    """Does config `name` fit these GPUs (None: the catalogue) under `strategy`?"""
    catalogue = reports.catalogue(config, name, strategy)
    question = None if gpus is None else _question(config, name, gpus, strategy, reports)
    return Fit(combine(catalogue, question, gpus), gpus, strategy)


def needs_catalogue(entries: Sequence[MigConfigEntry], question: ConfigReport) -> bool:
    """Whether the catalogue report can add a problem to this node or model question's report (`combine`).

    It cannot when no entry has a device-filter and the question already fails. Such a config's catalogue
    errors are its entry-level errors (a negative or repeated GPU index), which the question's report
    holds too, at the same paths and rules and, when problems are truncated, among the same first ones
    (both reports list entry-level findings first); plus, when it fits no model, the closest models'
    findings and `fits-no-gpu`, which `text_errors` drops for a question that fails. What a filtered
    entry gets wrong on the models it names, and a valid question's `fits-no-gpu` or
    `does-not-fit-model`, need the catalogue. tests/mig/test_fit.py and test_fuzz.py check that
    `fit_all`, which skips the rest, agrees with `fit`, which never does."""
    return question.valid or any(e.device_filter for e in entries)


def fit_all(
    config: MigPartedConfig, names: Sequence[str] | None, gpus: NodeGpus | None, strategy: Strategy | None = None
) -> tuple[Fit, ...]:
    """`fit` for many configs of one file (what `migops validate` runs): one `Validation` of the file,
    which shares the work common to the configs and to the node and catalogue questions, and a catalogue
    report only where it can change the verdict (`needs_catalogue`)."""
    chosen = list(names) if names is not None else [n for n, _ in config.configs]
    with paused_gc():
        validation = Validation(config, gpus.gpus if gpus is not None and gpus.exact else None, strategy)
        if gpus is None:
            found = tuple(Fit(r, None, strategy) for r in validation.against_catalogue(chosen))
        else:
            if gpus.exact:
                questions = dict(zip(chosen, validation.on_node(chosen)))
            else:
                questions = {n: _question(config, n, gpus, strategy, DIRECT) for n in chosen}
            asked = [n for n in chosen if needs_catalogue(validation.entries(n), questions[n])]
            catalogue: dict[str, ConfigReport | None] = dict.fromkeys(chosen)
            catalogue.update(zip(asked, validation.against_catalogue(asked)))
            found = tuple(Fit(_combined(catalogue[n], questions[n], gpus), gpus, strategy) for n in chosen)
        del validation  # free the shared work before the collector resumes (see Validation)
    return found


def _combined(catalogue: ConfigReport | None, question: ConfigReport, gpus: NodeGpus) -> ConfigReport:
    """`combine`, or the question's report alone where the catalogue cannot change it (`needs_catalogue`)."""
    return question if catalogue is None else combine(catalogue, question, gpus)
