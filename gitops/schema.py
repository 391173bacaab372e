"""nodes.yaml's published JSON Schema (migops/schemas/nodes.v1.schema.json), applied by the loader.

The schema is what editors check as you type (yaml-language-server's `$schema`); `repo.parse_nodes`
applies it too, so the file an editor accepts and the one the reconciler and `migops validate` accept
are one. What a schema cannot say -- that a named config exists in config.yaml, that it fits the nodes
-- stays in code (repo, desired, check).
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any

from migops.mig.problems import Problem, index_path, key_path

NODES_SCHEMA = "nodes.v1.schema.json"


@cache
def schema(name: str = NODES_SCHEMA) -> dict[str, Any]:
    return json.loads(files("migops").joinpath("schemas", name).read_text())


@cache
def _validator(name: str) -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema(name))


def _path(parts: Any) -> str:
    path = ""
    for part in parts:
        path = index_path(path, part) if isinstance(part, int) else key_path(path, part)
    return path


def schema_problems(doc: object, name: str = NODES_SCHEMA) -> list[Problem]:
    """One problem per schema violation, at its path (the deepest, most specific error of each branch),
    rule `schema-<keyword>` (schema-pattern, schema-enum, ...)."""
    from jsonschema.exceptions import best_match

    defs = {id(d): k for k, d in schema(name).get("$defs", {}).items()}
    out = []
    for error in sorted(_validator(name).iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        error = best_match([error]) if error.context else error
        what = _NAMED.get(defs.get(id(error.schema), ""))
        message = (
            f"{error.instance!r} is not a valid {what}" if what and error.validator == "pattern" else error.message
        )
        out.append(Problem(_path(error.absolute_path), f"schema-{error.validator}", message))
    return out


# What a $defs entry is, for messages (a regular expression is no explanation).
_NAMED = {
    "labelKey": "label key: [prefix/]name, the prefix a DNS subdomain, the name 1-63 letters, digits, '-', '_' "
    "or '.', starting and ending with a letter or digit",
    "labelValue": "label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
    "dnsSubdomain": "name: lower-case letters, digits, '-' and '.'",
    "dnsLabel": "name: lower-case letters, digits and '-'",
}
