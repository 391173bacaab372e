"""`migops diff -o json` and `migops status -o json` against their published schemas, on a real cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
from gitrepo import CONFIG_YAML, UNPLACEABLE, nodes_yaml

from migops.cli.outputs import json_schema, schema_id

MIGOPS = Path(sys.executable).parent / "migops"


def _json(command: str, *args: str) -> dict:
    proc = subprocess.run(
        [str(MIGOPS), command, *args, "-o", "json"], capture_output=True, text=True, timeout=120, check=False
    )
    doc = json.loads(proc.stdout)
    assert doc["schema"] == schema_id(command)
    errors = list(jsonschema.Draft202012Validator(json_schema(command)).iter_errors(doc))
    assert errors == [], [f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]]
    return doc


def test_diff_and_status_match_their_schemas(rplane, repo, gpu_nodes, tmp_path) -> None:
    gpu_nodes(2, pool="json")
    nodes = nodes_yaml("  - nodeSelector: {matchLabels: {pool: json}}\n    config: all-3g.40gb")
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": nodes})
    common = [
        "--repo",
        repo.url,
        "--kubeconfig",
        str(rplane.admin_kubeconfig),
        "--name",
        "json",
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    changes = _json("diff", *common)
    assert changes["changed"] and len(changes["labels"]) == 2
    once = subprocess.run(
        [str(MIGOPS), "reconcile", "--once", *common], capture_output=True, text=True, timeout=120, check=False
    )
    assert once.returncode == 0, once.stderr
    status = _json("status", "json", "--kubeconfig", str(rplane.admin_kubeconfig))
    assert [i["name"] for i in status["items"]] == ["json"]
    repo.commit({"config.yaml": UNPLACEABLE, "nodes.yaml": nodes.replace("all-3g.40gb", "too-many")})
    refused = _json("diff", *common)
    assert refused["outcome"] and refused["problems"]
