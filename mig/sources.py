"""Where the mig-parted configs in a file are: the file itself, or ConfigMaps in a manifest stream.

A file is one of two things, decided by its first document that is not empty:

* a Kubernetes manifest stream, when that document is an object (a mapping with `apiVersion` and
  `kind`): every document is read as kubectl reads it, a `kind: List` contributes its items, and each
  ConfigMap holding a mig-parted config under `data."config.yaml"` is a config source; every other
  object is skipped (and counted);
* a bare mig-parted config otherwise, read exactly as mig-parted reads it: the first document only.

A ConfigMap holds a MIG config when its `config.yaml` mentions `mig-configs`, or when it is named
`default-mig-parted-config` (the GPU Operator's) or labelled `migops.io/mig-config: "true"` (then a
missing key is an error). Locations inside a ConfigMap's `config.yaml: |` block are lines of the whole
file. Pure functions: text in, sources out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from migops.mig.gcpause import paused_gc
from migops.mig.problems import MigError, Problem, index_path, key_path
from migops.mig.spec import CONFIGMAP_KEY, MigPartedConfig, decode_document, is_kubernetes_object, parse_embedded
from migops.mig.yamlsafe import DEFAULT_LIMITS, Document, InputLimits, read_first, read_stream

DEFAULT_CONFIGMAP = "default-mig-parted-config"
MIG_CONFIGMAP_LABEL = "migops.io/mig-config"  # "true" on any other ConfigMap holding a MIG config


@dataclass(frozen=True)
class ConfigSource:
    """One mig-parted config found in a file."""

    object: str | None  # None: the file is the config; else e.g. "ConfigMap gpu-operator/custom-mig-config"
    line: int | None  # where the object starts in the file
    config: MigPartedConfig | None  # None when it does not parse (see problems)
    problems: tuple[Problem, ...] = ()  # parse errors, each with line and column where known


@dataclass(frozen=True)
class SkippedObject:
    """An object of a manifest stream that holds no MIG config."""

    kind: str
    name: str  # namespace/name, name, or "" (a Kustomization has none)
    line: int | None
    reason: str = ""


@dataclass(frozen=True)
class FileContents:
    manifests: bool  # a Kubernetes manifest stream (else a bare mig-parted config)
    sources: tuple[ConfigSource, ...]
    skipped: tuple[SkippedObject, ...] = ()


def _mapping(value: object) -> Mapping[str, object]:
    """A JSON object, or an empty one in place of anything else (a missing or malformed field)."""
    return value if isinstance(value, Mapping) else {}


def _object_name(obj: Mapping[str, object]) -> str:
    meta = _mapping(obj.get("metadata"))
    name = meta.get("name") if isinstance(meta.get("name"), str) else ""
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if isinstance(namespace, str) and namespace and name else str(name)


def _is_mig_configmap(obj: Mapping[str, object]) -> tuple[bool, bool]:
    """(holds a MIG config, is declared one): declared by name or label; held when its config.yaml
    mentions mig-configs (then it is read, and what it holds is reported, broken or not)."""
    meta = _mapping(obj.get("metadata"))
    labels = meta.get("labels")
    declared = meta.get("name") == DEFAULT_CONFIGMAP or (
        isinstance(labels, Mapping) and labels.get(MIG_CONFIGMAP_LABEL) == "true"
    )
    data = obj.get("data")
    payload = data.get(CONFIGMAP_KEY) if isinstance(data, Mapping) else None
    return isinstance(payload, str) and "mig-configs" in payload, declared


def _stream(text: str, docs: list[Document], limits: InputLimits) -> FileContents:
    sources: list[ConfigSource] = []
    skipped: list[SkippedObject] = []
    for doc in docs:
        value = doc.value
        if value is None:
            continue  # an empty document (e.g. a leading or trailing ---)
        if not is_kubernetes_object(value):
            sources.append(
                ConfigSource(
                    f"document {doc.index + 1}",
                    doc.start.line,
                    None,
                    (
                        Problem(
                            "",
                            "not-a-kubernetes-object",
                            "in a manifest stream every document must be a Kubernetes "
                            "object (apiVersion and kind); kubectl refuses this one",
                            "error",
                            doc.start.line,
                            doc.start.column,
                        ),
                    ),
                )
            )
            continue
        objects: list[tuple[str, Mapping[str, object]]] = [("", value)]
        items = value.get("items") if value.get("kind") == "List" else None
        if isinstance(items, list):
            objects = [(index_path("items", i), item) for i, item in enumerate(items) if isinstance(item, Mapping)]
        for prefix, obj in objects:
            loc = doc.locate(prefix) or doc.start
            kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "(no kind)"
            label = f"{kind} {_object_name(obj) or f'(no name, line {loc.line})'}"
            if kind != "ConfigMap":
                skipped.append(SkippedObject(str(kind), _object_name(obj), loc.line))
                continue
            holds, declared = _is_mig_configmap(obj)
            if not holds and not declared:
                skipped.append(
                    SkippedObject("ConfigMap", _object_name(obj), loc.line, "no MIG config under config.yaml")
                )
                continue
            try:
                config = parse_embedded(text, doc, obj, prefix, limits)
            except MigError as exc:
                sources.append(ConfigSource(label, loc.line, None, _with_prefix(exc.problems, doc, prefix)))
                continue
            sources.append(ConfigSource(label, loc.line, config))
    return FileContents(True, tuple(sources), tuple(skipped))


def _with_prefix(problems: tuple[Problem, ...], doc: Document, prefix: str) -> tuple[Problem, ...]:
    """ConfigMap-level problems (e.g. no config.yaml) located in the manifest."""
    out = []
    for p in problems:
        if p.line is None:
            loc = doc.locate(key_path(prefix, "data") if p.path.startswith("data") else prefix) or doc.start
            p = p.at(loc.line, loc.column)
        out.append(p)
    return tuple(out)


@paused_gc()
def read_file(text: str | bytes, limits: InputLimits = DEFAULT_LIMITS) -> FileContents:
    """The config sources in one file's text (see the module docstring for how a file is classified)."""
    try:
        first = read_first(text, limits)
    except MigError as exc:
        return FileContents(False, (ConfigSource(None, None, None, exc.problems),))
    manifests = is_kubernetes_object(first.value)
    if not manifests and first.value is None and first.rest is not None:
        try:  # a leading empty document: the first one with content decides
            docs = read_stream(text, limits)
            nonempty = next((d for d in docs if d.value is not None), None)
            manifests = nonempty is not None and is_kubernetes_object(nonempty.value)
        except MigError:
            manifests = False
    if not manifests:
        try:
            config = decode_document(first)
        except MigError as exc:
            return FileContents(False, (ConfigSource(None, None, None, exc.problems),))
        return FileContents(False, (ConfigSource(None, None, config),))
    try:
        docs = read_stream(text, limits)
    except MigError as exc:
        return FileContents(True, (ConfigSource(None, None, None, exc.problems),))
    source = text if isinstance(text, str) else text.decode("utf-8")
    return _stream(source, docs, limits)


def mentions_mig(text: str | bytes) -> bool:
    """Whether a file found by walking a directory is worth checking: it names mig-configs."""
    needle = "mig-configs"
    return needle in text if isinstance(text, str) else needle.encode() in text
