"""nodes.yaml's published JSON Schema and the loader agree: what an editor accepts (the schema), the
reconciler and `migops validate` accept (repo.parse_nodes, which applies the schema too); every file the
code refuses for its structure, the schema refuses as well."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from migops.gitops.repo import parse_nodes
from migops.gitops.schema import schema, schema_problems

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "migops" / "schemas" / "nodes.v1.schema.json"

VALID = [
    {"version": "v1"},
    {
        "version": "v1",
        "strategy": "mixed",
        "rollout": {"maxUnavailable": 3},
        "default": "a",
        "prune": True,
        "configMap": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
        "assignments": [
            {"config": "a", "nodes": ["n1", "n2"]},
            {"config": "b", "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}},
            {
                "config": "c",
                "nodeSelector": {
                    "matchExpressions": [
                        {"key": "pool", "operator": "In", "values": ["x", "y"]},
                        {"key": "spot", "operator": "DoesNotExist"},
                    ]
                },
            },
        ],
    },
    {"version": "v1", "rollout": {"maxUnavailable": "25%"}},
    {"version": "v1", "rollout": {"maxUnavailable": "100%"}},
    {"version": "v1", "rollout": {"maxDefaulted": 0, "progressDeadlineSeconds": 60}},
]
INVALID = [
    [],
    {},
    {"version": "v2"},
    {"version": "v1", "extra": 1},
    {"version": "v1", "strategy": "mixd"},
    {"version": "v1", "rollout": {"maxUnavailable": 0}},
    {"version": "v1", "rollout": {"maxUnavailable": "0%"}},
    {"version": "v1", "rollout": {"maxUnavailable": "101%"}},
    {"version": "v1", "rollout": {"maxUnavailable": True}},
    {"version": "v1", "rollout": {"surge": 1}},
    {"version": "v1", "rollout": {"maxDefaulted": -1}},
    {"version": "v1", "rollout": {"progressDeadlineSeconds": 0}},
    {"version": "v1", "prune": "yes"},
    {"version": "v1", "default": 3},
    {"version": "v1", "configMap": {"name": "Not_A_Name"}},
    {"version": "v1", "configMap": {"namespace": "a.b"}},
    {"version": "v1", "assignments": {}},
    {"version": "v1", "assignments": [{"nodes": ["n1"]}]},
    {"version": "v1", "assignments": [{"config": "a"}]},
    {"version": "v1", "assignments": [{"config": "a", "nodes": ["n1"], "nodeSelector": {"matchLabels": {"a": "b"}}}]},
    {"version": "v1", "assignments": [{"config": "a", "nodes": []}]},
    {"version": "v1", "assignments": [{"config": "a", "nodeSelector": {}}]},
    {"version": "v1", "assignments": [{"config": "a", "nodeSelector": {"matchLabels": {"a": 1}}}]},
    {"version": "v1", "assignments": [{"config": "a", "nodeSelector": {"matchLabels": {"bad key": "v"}}}]},
    {"version": "v1", "assignments": [{"config": "a", "nodeSelector": {"matchLabels": {"k": "bad value"}}}]},
    {
        "version": "v1",
        "assignments": [{"config": "a", "nodeSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]}}],
    },
    {
        "version": "v1",
        "assignments": [
            {"config": "a", "nodeSelector": {"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["v"]}]}}
        ],
    },
    {
        "version": "v1",
        "assignments": [{"config": "a", "nodeSelector": {"matchExpressions": [{"key": "k", "operator": "Is"}]}}],
    },
]


def test_the_published_file_is_a_valid_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_FILE.read_text()))
    assert schema() == json.loads(SCHEMA_FILE.read_text())


@pytest.mark.parametrize("doc", VALID)
def test_valid_for_both(doc: object) -> None:
    assert list(jsonschema.Draft202012Validator(schema()).iter_errors(doc)) == []
    found: list = []
    assert parse_nodes(doc, found) is not None and found == []


@pytest.mark.parametrize("doc", INVALID)
def test_invalid_for_both(doc: object) -> None:
    assert schema_problems(doc), "the schema accepts it"
    found: list = []
    assert parse_nodes(doc, found) is None and found, "the loader accepts it"


def test_the_schema_names_the_fields_the_loader_knows() -> None:
    """A field added to the loader and not to the schema would make the schema refuse a valid file."""
    from migops.gitops import repo

    assert set(schema()["properties"]) == set(repo._TOP_FIELDS)
    assert set(schema()["properties"]["rollout"]["properties"]) == set(repo._ROLLOUT_FIELDS)


def test_the_examples_pass_the_schema() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "config-repo" / "nodes.yaml").read_text())
    assert schema_problems(doc) == []
