"""The compiled CEL runtime (migops.mig.selectors) gives cel-python's answers on the selector corpus,
on every MIG device the driver would publish for every catalogue model: the same verdict, the same
absent key where one is missing, a failure where cel-python fails."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from migops.mig import dra, selectors
from migops.mig.catalogue import catalogue

sys.path.insert(0, str(Path(__file__).resolve().parent))
import celpy_reference as reference
from selector_corpus import CORPUS

# One model of each MIG table and architecture (cel-python takes a while per device): A100-SXM4-40GB,
# A100-SXM4-80GB, A30, H100-SXM5-80GB, H200, GH200, B200, RTX PRO 6000.
MODELS = (
    "0x20B010DE",
    "0x20B210DE",
    "0x20B710DE",
    "0x233010DE",
    "0x233510DE",
    "0x234210DE",
    "0x290110DE",
    "0x2BB510DE",
)


def _devices() -> list[dict]:
    gpus = [g for g in catalogue().gpus if g.device_id in MODELS]
    keys = dict.fromkeys(
        k for gpu in gpus for _, ks in dra.model_devices(gpu).devices + dra.model_devices(gpu).generic for k in ks
    )
    return [json.loads(k) for k in keys]


DEVICES = _devices()


def test_the_models_are_there() -> None:
    assert {g.device_id for g in catalogue().gpus} >= set(MODELS)


def _outcome(judge, device) -> tuple:
    try:
        return ("verdict", judge(device))
    except selectors.CelError as exc:
        key = selectors.missing_key(str(exc)) or reference.missing_key(str(exc))
        return ("absent", key) if key else ("fails",)


@pytest.mark.parametrize("expression", CORPUS)
def test_same_answers_as_cel_python(expression: str) -> None:
    compiled = [
        _outcome(lambda d: selectors.selects(expression, selectors.cel_device(d, dra.DRIVER)), d) for d in DEVICES
    ]
    pure = [_outcome(lambda d: reference.selects(expression, reference.cel_device(d)), d) for d in DEVICES]
    assert compiled == pure


def test_the_corpus_is_not_trivial() -> None:
    """Each outcome occurs: the comparison above could fail in each way."""
    seen = {
        _outcome(lambda d: selectors.selects(e, selectors.cel_device(d, dra.DRIVER)), d)[0]
        for e in CORPUS
        for d in DEVICES[:40]
    }
    assert seen == {"verdict", "absent", "fails"}
