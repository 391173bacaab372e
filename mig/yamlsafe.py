"""The project's one YAML/JSON loader for untrusted input: safe (C) loader, with bounds.

A YAML bomb (nested aliases), a deeply nested document or a 50 MB file must fail in milliseconds with
a clear error, never eat memory or time. The document is composed into nodes first (aliases stay
shared there), walked with a budget that counts every alias expansion, and only then constructed.
"""
from __future__ import annotations

from dataclasses import dataclass

import yaml

from migops.mig.problems import MigError, Problem, index_path, key_path

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Limits:
    """Bounds for one document. 1 MiB is the most a ConfigMap can hold anyway."""

    max_bytes: int = 1 << 20
    max_depth: int = 32
    max_nodes: int = 100_000  # nodes after alias expansion


DEFAULT_LIMITS = Limits()


def _fail(rule: str, message: str, path: str = "") -> MigError:
    return MigError([Problem(path, rule, message)])


def _check_nodes(root: yaml.Node, limits: Limits) -> None:
    """Walk the composed graph the way construction and later traversal would, within the budget."""
    budget = limits.max_nodes
    stack: list[tuple[yaml.Node, int, str]] = [(root, 1, "")]
    while stack:
        node, depth, path = stack.pop()
        budget -= 1
        if budget < 0:
            raise _fail("yaml-too-large", f"document expands to more than {limits.max_nodes} nodes "
                        "(aliases count each time they are used)")
        if depth > limits.max_depth:
            raise _fail("yaml-too-deep", f"document is nested deeper than {limits.max_depth} levels", path)
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in seen:
                        line = key.start_mark.line + 1
                        raise _fail("duplicate-key", f"key {key.value!r} appears twice in one mapping "
                                    f"(line {line}); the second would silently win",
                                    key_path(path, key.value))
                    seen.add(key.value)
                    child = key_path(path, key.value)
                else:
                    child = path
                stack.append((key, depth + 1, path))
                stack.append((value, depth + 1, child))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                stack.append((item, depth + 1, index_path(path, i)))


def _check_depth(text: str, limits: Limits) -> None:
    """Bound the nesting before composing. The C composer recurses once per level and crashes the
    process (SIGSEGV) on ~500k levels (`- - - ... x` fits in 1 MiB), and libyaml's scanner does
    O(flow depth) work per token, so a 1 MiB `[[[[...]]]]` takes minutes to compose. The event
    stream is produced iteratively and lazily: stop at the first collection past the limit."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > limits.max_depth:
                raise _fail("yaml-too-deep", f"document is nested deeper than {limits.max_depth} levels")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


def load_yaml(text: str | bytes, limits: Limits = DEFAULT_LIMITS) -> object:
    """Load one YAML (or JSON) document; raises MigError naming the rule it breaks."""
    size = len(text)
    if isinstance(text, str) and size <= limits.max_bytes:
        size = len(text.encode("utf-8", "surrogatepass"))  # the limit is in bytes, as a ConfigMap's is
    if size > limits.max_bytes:
        raise _fail("input-too-large", f"input is {size} bytes; the limit is {limits.max_bytes} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _fail("not-utf8", f"input is not UTF-8 text: {exc}") from None
    else:
        try:  # a lone surrogate (e.g. from a JSON "\ud800" escape) makes libyaml raise UnicodeEncodeError
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _fail("not-utf8", f"input is not valid Unicode text: {exc}") from None
    try:
        _check_depth(text, limits)
    except yaml.YAMLError as exc:
        raise _fail("yaml-syntax", f"not valid YAML: {' '.join(str(exc).split())}") from None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, limits)
        try:
            return loader.construct_document(node)
        except (ValueError, TypeError, LookupError, AttributeError, ArithmeticError) as exc:
            # A scalar that matches a YAML type but cannot be built: `2001-02-30`, `!!bool x`, an int of more
            # than 4300 digits, `!!timestamp 99999-01-01`. PyYAML lets these escape as plain errors.
            raise _fail("yaml-syntax", f"not valid YAML: a value cannot be constructed: {exc}") from None
    except yaml.YAMLError as exc:
        raise _fail("yaml-syntax", f"not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise _fail("yaml-too-deep", f"document is nested deeper than {limits.max_depth} levels") from None
    finally:
        loader.dispose()
