"""The MIG core's verdicts, memoised: the same config text is parsed once, the same config judged once.

Every rule comes from `migops.mig` (parse_config, validate, validate_on_node, validate_on_model, and
`migops.mig.fit`, which alone decides what a node's verdict is made of); this module only remembers
results:
- parsed files by a SHA-256 of the text, so a dry-run followed by the apply, Flux's re-apply every
  interval, and every Node label change against the same ConfigMap cost one parse;
- each named config's report by what it depends on: its name and entries (as parsed: paths,
  devices, filters, profiles, counts) and the question (the catalogue under a strategy, or a node's
  GPU models under a strategy). So an edit of one config in a file of eighty re-validates that one;
  the other seventy-nine are answered from memory, whichever revision of the file they came from.
A cold file is judged in one `validate` call, which shares the work common to its configs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from migops.mig import fit as _fit
from migops.mig.catalogue import GpuModel
from migops.mig.gfd import NodeGpus
from migops.mig.problems import MigError, Problem
from migops.mig.spec import MigPartedConfig, parse_config
from migops.mig.validate import ConfigReport, Strategy, validate, validate_on_model, validate_on_node
from migops.webhook.cache import LRU
from migops.webhook.memory import retained

# Both memos are bounded by the bytes their entries really hold (memory.retained: everything a parsed
# file or a report reaches, the catalogue's shared models left out), so a flood of distinct configs
# (bench/webhook_adversarial.py) cannot grow a worker by more than PARSED_BYTES + REPORT_BYTES. A weight
# guessed per kind would miss what a report's key keeps alive (an evicted file's parsed entries), and the
# memos would then hold far more than their bounds. A parsed file heavier than
# PARSED_BYTES (a text of ~1 MB) is parsed per review instead of kept; the config in force is kept by
# the webhook's state in any case.
PARSED_BYTES = 8 << 20
REPORT_BYTES = 6 << 20
_parsed: LRU[str, MigPartedConfig | tuple[Problem, ...]] = LRU(PARSED_BYTES)
_reports: LRU[tuple, ConfigReport] = LRU(REPORT_BYTES)
_SHARED = (GpuModel,)  # the catalogue's, alive as long as the process: no entry's own bytes


def _weight(cache: LRU[Any, Any], *objs: object) -> int:
    return retained(*objs, shared=_SHARED, limit=cache.size)


def digest(text: str) -> str:
    """SHA-256 of the text (lone surrogates from a JSON escape are hashed, not refused)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def parse(text: str, text_digest: str | None = None) -> MigPartedConfig:
    """parse_config(text), remembered; raises the same MigError every time for a bad text."""
    key = text_digest or digest(text)
    found = _parsed.get(key)
    if found is None:
        try:
            found = parse_config(text)
            found.by_name  # noqa: B018 - made now, so that the weight below counts it (every review asks it)
        except MigError as exc:
            # Its problems, not the exception: a kept exception holds the frames it was raised
            # through (the parser's, then each review's that raised it again), and with them the text
            # and the request. Each raise below is a new exception.
            found = exc.problems
        _parsed.put(key, found, weight=_weight(_parsed, key, found))
    if not isinstance(found, MigPartedConfig):
        raise MigError(found)
    return found


def on_catalogue(
    config: MigPartedConfig, names: Iterable[str], strategy: Strategy | None = None
) -> dict[str, ConfigReport]:
    """validate_against_catalogue for each name; those not remembered are judged in one call."""
    entries = config.by_name
    keys = {name: ("catalogue", name, entries[name], strategy) for name in names}
    found: dict[str, ConfigReport] = {}
    missing = []
    for name, key in keys.items():
        report = _reports.get(key)
        if report is None:
            missing.append(name)
        else:
            found[name] = report
    if missing:
        for name, report in zip(missing, validate(config, missing, strategy=strategy)):
            found[name] = report
            _reports.put(keys[name], report, weight=_weight(_reports, keys[name], report))
    return found


def on_node(config: MigPartedConfig, name: str, gpus: Sequence[GpuModel], strategy: Strategy | None) -> ConfigReport:
    """validate_on_node, remembered by (name, entries, the GPUs' device IDs in index order, strategy)."""
    key = ("node", name, config.entries(name), tuple(g.device_id for g in gpus), strategy)
    found = _reports.get(key)
    if found is None:
        found = validate_on_node(config, name, gpus, strategy)
        _reports.put(key, found, weight=_weight(_reports, key, found))
    return found


def on_model(config: MigPartedConfig, name: str, model: GpuModel, strategy: Strategy | None) -> ConfigReport:
    """validate_on_model, remembered by (name, entries, the model's device ID, strategy)."""
    key = ("model", name, config.entries(name), model.device_id, strategy)
    found = _reports.get(key)
    if found is None:
        found = validate_on_model(config, name, model, strategy)
        _reports.put(key, found, weight=_weight(_reports, key, found))
    return found


def _catalogue_one(config: MigPartedConfig, name: str, strategy: Strategy | None) -> ConfigReport:
    return on_catalogue(config, [name], strategy)[name]


REPORTS = _fit.Reports(catalogue=_catalogue_one, node=on_node, model=on_model)


def fit(config: MigPartedConfig, name: str, gpus: NodeGpus | None, strategy: Strategy | None) -> _fit.Fit:
    """`migops.mig.fit.fit` over the remembered reports."""
    return _fit.fit(config, name, gpus, strategy, REPORTS)


def forget() -> None:
    """Drop every remembered result (benchmarks of the first, uncached review)."""
    for cache in (_parsed, _reports):
        cache.clear()
