"""The MIG core's verdicts, memoised by content: the same config text is parsed and validated once.

Every rule comes from `migops.mig` (parse_config, validate_on_node, validate_against_catalogue); this
module only remembers results, keyed by a SHA-256 of the config text, so a dry-run followed by the
apply, Flux's re-apply every interval, and every Node label change against the same ConfigMap cost
one parse and one validation per (config, GPU models, strategy).
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence

from migops.mig.catalogue import GpuModel
from migops.mig.problems import MigError
from migops.mig.spec import MigPartedConfig, parse_config
from migops.mig.validate import ConfigReport, Strategy, validate_against_catalogue, validate_on_node
from migops.webhook.cache import LRU

_parsed: LRU[str, MigPartedConfig | MigError] = LRU(256)
_on_node: LRU[tuple, ConfigReport] = LRU(4096)
_on_catalogue: LRU[tuple, ConfigReport] = LRU(8192)


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
        except MigError as exc:
            found = exc
        _parsed.put(key, found)
    if isinstance(found, MigError):
        raise found
    return found


def on_node(text_digest: str, config: MigPartedConfig, name: str, gpus: Sequence[GpuModel],
            strategy: Strategy | None) -> ConfigReport:
    key = (text_digest, name, tuple(g.device_id for g in gpus), strategy)
    found = _on_node.get(key)
    if found is None:
        found = validate_on_node(config, name, gpus, strategy)
        _on_node.put(key, found)
    return found


def on_catalogue(text_digest: str, config: MigPartedConfig, name: str, strategy: Strategy | None = None) -> ConfigReport:
    key = (text_digest, name, strategy)
    found = _on_catalogue.get(key)
    if found is None:
        found = validate_against_catalogue(config, name, strategy)
        _on_catalogue.put(key, found)
    return found


def forget() -> None:
    """Drop every remembered result (benchmarks of the first, uncached review)."""
    for cache in (_parsed, _on_node, _on_catalogue):
        cache.clear()
