"""The proposal written into nodes.yaml's text, as a person would: the lines it changes and no others.

A node the proposal moves is taken out of any `nodes:` list that names it (an assignment left with no
node goes), and listed by name under an assignment of its new config (an existing list for that config,
else a new one at the end of `assignments`); names beat selectors and `default` (docs/reconciler.md), so
nothing else changes. Comments and layout stay. The caller checks the result with the loader and the
resolver before it is shown; `rewrite` is the fallback that keeps no comments.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import yaml

_PLAIN = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")


def _scalar(name: str) -> str:
    return (
        name if _PLAIN.match(name) and name not in ("true", "false", "null", "yes", "no", "on", "off") else repr(name)
    )


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
        names = [n.value for n in named[1].value if isinstance(n, yaml.ScalarNode)]
        cfg = chosen[1].value if chosen and isinstance(chosen[1], yaml.ScalarNode) else None
        keep = [n for n in names if n not in changes or changes[n] == cfg]
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
    doc = yaml.safe_load(t.text) or {}
    items = _moved(list(doc.get("assignments") or []), changes)
    block = yaml.safe_dump(items, default_flow_style=None, sort_keys=False, width=120)
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


def rewrite(text: str, changes: Mapping[str, str]) -> str:
    """The fallback: nodes.yaml loaded, changed and dumped whole (its comments are lost)."""
    doc = yaml.safe_load(text) or {}
    doc["assignments"] = _moved(list(doc.get("assignments") or []), changes)
    return yaml.safe_dump(doc, default_flow_style=None, sort_keys=False, width=120)
