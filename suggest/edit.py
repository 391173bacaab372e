"""The proposal written into nodes.yaml's text, as a person would: the lines it changes and no others.

A node the proposal moves is taken out of any `nodes:` list that names it (an assignment left with no
node goes), and listed by name under an assignment of its new config (an existing list for that config,
else a new one at the end of `assignments`); names beat selectors and `default` (docs/reconciler.md), so
nothing else changes. Comments and layout stay. The caller checks the result with the loader and the
resolver before it is shown; `rewrite` is the fallback that keeps no comments.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import yaml

from migops.mig.yamlsafe import STR, load_yaml, resolve

_PLAIN = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")
_PY_STR = "tag:yaml.org,2002:str"


def reads_as_text(name: str) -> bool:
    """Written plain, `name` reads back as the same string: by the node's reader (go-yaml v2's YAML 1.1
    rules: `y`, `on`, `1e3`, `0x10`, `123`, `1.50`, `.inf` are not strings) and by PyYAML, which edits
    the text."""
    pyyaml = yaml.SafeLoader.resolve(yaml.SafeLoader, yaml.ScalarNode, name, (True, False))  # type: ignore[arg-type]
    return bool(_PLAIN.match(name)) and resolve("", name)[0] == STR and pyyaml == _PY_STR


def _scalar(name: str) -> str:
    """A name as nodes.yaml spells it: plain when it reads as itself, else double-quoted."""
    return name if reads_as_text(name) else json.dumps(name)


def _text(node: yaml.Node) -> str | None:
    """A scalar's value when the node's reader reads it as a string (quoted, or plain and reading as
    text); None for anything else (`config: y` is a boolean to go-yaml, whatever PyYAML says)."""
    if not isinstance(node, yaml.ScalarNode):
        return None
    if node.style in ("'", '"') or resolve("", node.value)[0] == STR:
        return str(node.value)
    return None


def _flow(names: list[str]) -> str:
    return "[" + ", ".join(_scalar(n) for n in names) + "]"


def _key(node: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return k, v
    return None


class TextEdits:
    """The file as lines with their offsets, and a list of edits applied at the end."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0]
        for line in text.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))
        self.edits: list[tuple[int, int, str]] = []

    def line_start(self, line: int) -> int:
        return self.starts[min(line, len(self.starts) - 1)]

    def end_line(self, node: yaml.Node) -> int:
        """The first line after `node`. A block collection's own end mark sits at the next token (the
        next key or item, maybe on a line of its own): its last scalar's end is where it ends."""
        while isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.flow_style and node.value:
            last = node.value[-1]
            node = last[1] if isinstance(last, tuple) else last
        mark = node.end_mark
        return mark.line if mark.column == 0 else mark.line + 1

    def apply(self) -> str:
        out = self.text
        for start, end, new in sorted(self.edits, key=lambda e: (e[0], e[1]), reverse=True):
            out = out[:start] + new + out[end:]
        return out


def edit_nodes(text: str, changes: Mapping[str, str]) -> str:
    """nodes.yaml's text with each node of `changes` (node -> config) listed under its new config."""
    if not changes:
        return text
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        raise ValueError("nodes.yaml is not a mapping")
    t = TextEdits(text if text.endswith("\n") else text + "\n")
    found = _key(root, "assignments")
    seq = found[1] if found else None
    if seq is not None and not isinstance(seq, yaml.SequenceNode):
        raise ValueError("assignments is not a list")
    if seq is None or seq.flow_style or not seq.value:
        return _rewrite_assignments(t, root, found, changes)
    wanted: dict[str, list[str]] = defaultdict(list)
    for node, config in sorted(changes.items()):
        wanted[config].append(node)
    # Existing `nodes:` lists: drop moved nodes, add the ones moving to that list's config.
    for item in seq.value:
        if not isinstance(item, yaml.MappingNode):
            continue
        named, chosen = _key(item, "nodes"), _key(item, "config")
        if named is None or not isinstance(named[1], yaml.SequenceNode):
            continue
        names = [_text(n) for n in named[1].value]
        if None in names:
            continue  # not a list of names (the loader refuses it); left as it is
        cfg = _text(chosen[1]) if chosen else None
        keep = [n for n in names if n is not None and (n not in changes or changes[n] == cfg)]
        if cfg in wanted:
            keep += [n for n in wanted.pop(cfg) if n not in keep]
        if keep == names:
            continue
        if not keep:
            start = t.line_start(item.start_mark.line)
            t.edits.append((start, t.line_start(t.end_line(item)), ""))
            continue
        value = named[1]
        if value.flow_style:
            t.edits.append((value.start_mark.index, value.end_mark.index, _flow(keep)))
        else:
            indent = " " * value.start_mark.column
            lines = "".join(f"{indent}- {_scalar(n)}\n" for n in keep)
            start = t.line_start(value.start_mark.line)
            first = t.text[start : value.start_mark.index]
            t.edits.append((start, t.line_start(t.end_line(value)), first + lines[len(indent) :]))
    if wanted:
        indent = " " * seq.start_mark.column
        block = "".join(
            f"{indent}- nodes: {_flow(names)}\n{indent}  config: {_scalar(config)}\n"
            for config, names in wanted.items()
        )
        at = t.line_start(t.end_line(seq))
        t.edits.append((at, at, block))
    return t.apply()


def _rewrite_assignments(
    t: TextEdits, root: yaml.MappingNode, found: tuple[yaml.Node, yaml.Node] | None, changes: Mapping[str, str]
) -> str:
    """`assignments` absent, empty or in flow style: its value written anew as a block list."""
    doc = load_yaml(t.text) or {}
    items = _moved(list(doc.get("assignments") or []) if isinstance(doc, dict) else [], changes)
    block = _dump(items)
    block = "".join(f"  {line}\n" for line in block.splitlines())
    if found is None:
        t.edits.append((len(t.text), len(t.text), f"assignments:\n{block}"))
    else:
        key, value = found
        start = t.line_start(key.start_mark.line)
        end = t.line_start(t.end_line(value))
        t.edits.append((start, end, t.text[start : key.end_mark.index] + ":\n" + block))
    return t.apply()


def _moved(items: list[Any], changes: Mapping[str, str]) -> list[Any]:
    out = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("nodes"), list):
            names = [n for n in item["nodes"] if n not in changes]
            if not names:
                continue
            item = {**item, "nodes": names}
        out.append(item)
    wanted: dict[str, list[str]] = defaultdict(list)
    for node, config in sorted(changes.items()):
        wanted[config].append(node)
    out += [{"nodes": names, "config": config} for config, names in wanted.items()]
    return out


class _QuotingDumper(yaml.SafeDumper):
    """PyYAML's dumper, quoting every string that would not read back as itself under YAML 1.1."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(_PY_STR, value, style=None if reads_as_text(value) else '"')


_QuotingDumper.add_representer(str, _represent_str)


def _dump(value: object) -> str:
    return yaml.dump(value, Dumper=_QuotingDumper, default_flow_style=None, sort_keys=False, width=120)


def rewrite(text: str, changes: Mapping[str, str]) -> str:
    """The fallback: nodes.yaml loaded (as the node's reader reads it), changed and dumped whole (its
    comments are lost)."""
    doc = load_yaml(text) or {}
    if not isinstance(doc, dict):
        raise ValueError("nodes.yaml is not a mapping")
    doc["assignments"] = _moved(list(doc.get("assignments") or []), changes)
    return _dump(doc)
