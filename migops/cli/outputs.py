"""Machine-readable output is a contract: every `-o json` document names its shape in `schema`
("<command>/v<N>"), described by the JSON Schema migops/schemas/<command>.v<N>.schema.json (installed with
the package; docs/json-output.md). Fields may be added within a version; a change that removes, renames
or retypes one is a new version, named in CHANGELOG.md."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

VERSIONS = {
    "validate": 1,
    "plan": 1,
    "gpus": 1,
    "gpus-check": 1,
    "probe": 1,
    "diff": 1,
    "status": 1,
    "suggest": 1,
    "fleet-status": 1,
    "fleet-diff": 1,
}


def schema_id(command: str) -> str:
    return f"{command}/v{VERSIONS[command]}"


def schema_file(command: str) -> str:
    return f"{command}.v{VERSIONS[command]}.schema.json"


def document(command: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` with its schema named first."""
    return {"schema": schema_id(command), **body}


def json_schema(command: str) -> dict[str, Any]:
    from importlib.resources import files  # imports zipfile and tempfile: only where a schema is read

    return json.loads(files("migops").joinpath("schemas", schema_file(command)).read_text())
