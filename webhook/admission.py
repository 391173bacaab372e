"""AdmissionReview v1 in and out: the envelope checks, the verdict, and the response body.

Everything here is pure. A request that is not a well-formed AdmissionReview is a client error
(`BadReview`, answered 400 with a message); anything about the object itself is a verdict
(allowed or denied, with warnings), answered 200 as the API server expects.
"""

from __future__ import annotations

import base64
import json
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson

from migops.api import objects

MAX_BODY = 8 << 20  # an AdmissionReview holds object and oldObject, each up to etcd's 1.5 MiB (app.py, worker.py)
API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_WARNING = 120  # the API server's advice; longer ones may be truncated
MAX_WARNINGS = 10  # the API server drops warnings past 4096 characters in all
MAX_MESSAGE = 4000  # status.message: enough for every problem of a bad config, bounded for the API server
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
# Kubernetes' own limits on what the rules read (apimachinery's validation): nothing the API server
# stores exceeds them, so a review beyond them is refused before any work, and no cache key or entry
# ever holds more than them.
MAX_NAME = 253  # metadata.name / namespace (DNS subdomain)
MAX_LABEL_KEY = 253 + 1 + 63  # prefix / name
MAX_LABEL_VALUE = 63
MAX_ANNOTATIONS = 256 << 10  # total size of keys and values
MAX_USERNAME = 1024  # no Kubernetes limit; longer ones are not names anyone authenticates as
MAX_GROUPS = 256
MAX_DEPTH = 100  # JSON nesting: a Pod's deepest field (its managedFields included) is under 30 levels


class BadReview(ValueError):
    """The body is not an AdmissionReview this webhook can answer: HTTP 400 with this message."""


@dataclass(frozen=True)
class Request:
    """The parts of `request` the rules read; `raw` keeps the rest."""

    uid: str
    kind: str  # request.kind.kind (after conversion: what the webhook registered for)
    group: str
    operation: str
    name: str
    namespace: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool
    raw: dict[str, Any]
    username: str = ""  # request.userInfo.username: who writes
    sub_resource: str = ""  # request.subResource ("status" for nodes/status)
    refusal: tuple[tuple[str, str], ...] = ()  # (rule, text): beyond Kubernetes' limits, denied before any rule


def decode(body: bytes) -> object:
    """The JSON body: orjson (several times faster than the stdlib on a review), and the stdlib for
    what orjson refuses but JSON allows (a lone surrogate escape, an integer beyond 64 bits), so the
    answer to such content is the same denial as before, not a 400. Raises ValueError when the body
    is not JSON at all, BadReview when it nests deeper than MAX_DEPTH."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        try:
            doc = json.loads(body)
        except RecursionError:
            raise BadReview(f"body is not JSON nested at most {MAX_DEPTH} levels deep") from None
    deep = too_deep(doc)
    if deep is not None:
        raise BadReview(f"{deep}: nested deeper than {MAX_DEPTH} levels (no object this webhook reviews comes near)")
    return doc


def too_deep(doc: object, limit: int | None = None) -> str | None:
    """The path of the first value nested deeper than `limit` (MAX_DEPTH), None when none is.

    Every rule may repr(), hash or walk what it reads (cache keys are digests of repr()), and Python
    recurses for that: 1,000 levels in a Pod's resources.limits once raised RecursionError in a rule
    (a 500). Bounded here, once, no rule meets a deeper value. Iterative: the walk itself cannot recurse."""
    limit = MAX_DEPTH if limit is None else limit
    # (value, depth, (key, parent link)): the path is rebuilt only for the one that is too deep.
    stack: list[tuple[object, int, tuple | None]] = [(doc, 0, None)]
    while stack:
        value, depth, link = stack.pop()
        if depth > limit:
            return _path(link)
        if isinstance(value, dict):
            stack.extend((v, depth + 1, (k, link)) for k, v in value.items() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend((v, depth + 1, (i, link)) for i, v in enumerate(value) if isinstance(v, (dict, list)))
    return None


def _path(link: tuple | None, shown: int = 8) -> str:
    keys: list[int | str] = []
    while link is not None:
        keys.append(link[0])
        link = link[1]
    keys.reverse()
    text = ""
    for key in keys[:shown]:
        if isinstance(key, int):
            text += f"[{key}]"
        elif key.isidentifier():
            text += f".{key}" if text else key
        else:
            text += f"[{_key(key)}]"
    return text + (f"... ({len(keys)} levels)" if len(keys) > shown else "")


def parse_review(doc: object) -> Request:
    """Check the envelope of a decoded AdmissionReview; raise BadReview naming the field."""
    req = _envelope(doc)
    uid, kind, operation = _what(req)
    obj, old, refusal = _objects(req, kind, operation)
    name, namespace = req.get("name") or "", req.get("namespace") or ""
    if not isinstance(name, str) or not isinstance(namespace, str):
        raise BadReview("request.name and request.namespace must be strings")
    for field_name, value in (("name", name), ("namespace", namespace)):
        if len(value) > MAX_NAME:
            refusal.append(("object-limits", f"request.{field_name}: longer than {MAX_NAME} characters"))
    dry_run = req.get("dryRun", False)
    if not isinstance(dry_run, bool) and dry_run is not None:
        raise BadReview("request.dryRun: must be a boolean")
    sub_resource = req.get("subResource") or ""
    if not isinstance(sub_resource, str) or len(sub_resource) > 63:
        raise BadReview("request.subResource: must be a string of at most 63 characters")
    if not name:
        name = objects.meta(obj or old).get("name") or ""  # a string of at most MAX_NAME: check_object saw it
    return Request(
        uid,
        kind["kind"],
        kind.get("group", ""),
        operation,
        name[:MAX_NAME],
        namespace[:MAX_NAME],
        obj,
        old,
        bool(dry_run),
        req,
        _username(req.get("userInfo")),
        sub_resource,
        tuple(dict.fromkeys(refusal)),
    )


def _envelope(doc: object) -> dict[str, Any]:
    """The review's `request`, once apiVersion and kind say it is an AdmissionReview."""
    if not isinstance(doc, dict):
        raise BadReview(f"body must be a JSON object (an AdmissionReview), not {type(doc).__name__}")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise BadReview(
            f"apiVersion/kind must be {API_VERSION}/{KIND}, not "
            f"{_short(doc.get('apiVersion'))}/{_short(doc.get('kind'))}"
        )
    req = doc.get("request")
    if not isinstance(req, dict):
        raise BadReview("request: missing or not an object")
    return req


def _what(req: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    """The request's uid, kind and operation."""
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > 128:
        raise BadReview("request.uid: missing, empty or not a string of at most 128 characters")
    kind = req.get("kind")
    if (
        not isinstance(kind, dict)
        or not isinstance(kind.get("kind"), str)
        or not isinstance(kind.get("group", ""), str)
    ):
        raise BadReview("request.kind: must be an object with group, version and kind")
    operation = req.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        raise BadReview(f"request.operation: must be one of {', '.join(sorted(OPERATIONS))}, not {_short(operation)}")
    return uid, kind, operation


def _objects(req: dict[str, Any], kind: dict[str, Any], operation: str) -> tuple[Any, Any, list[tuple[str, str]]]:
    """object and oldObject, their shapes checked, and what of them is beyond Kubernetes' limits."""
    obj, old = req.get("object"), req.get("oldObject")
    refusal: list[tuple[str, str]] = []
    for field_name, value in (("object", obj), ("oldObject", old)):
        if value is not None and not isinstance(value, dict):
            raise BadReview(f"request.{field_name}: must be an object or null")
        if value is not None:
            refusal += check_object(value, f"request.{field_name}")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise BadReview(f"request.object: required for {operation}")
    for field_name, value in (("object", obj), ("oldObject", old)):
        if value is not None:
            check_shape((kind.get("group", ""), kind["kind"]), value, f"request.{field_name}")
    return obj, old, refusal


def _username(info: object) -> str:
    if info is None:
        return ""
    if not isinstance(info, dict):
        raise BadReview("request.userInfo: must be an object")
    username = info.get("username", "")
    if username is None:
        username = ""
    if not isinstance(username, str) or len(username) > MAX_USERNAME:
        raise BadReview(f"request.userInfo.username: must be a string of at most {MAX_USERNAME} characters")
    groups = info.get("groups")
    if groups is not None and not (
        isinstance(groups, list)
        and len(groups) <= MAX_GROUPS
        and all(isinstance(g, str) and len(g) <= MAX_USERNAME for g in groups)
    ):
        raise BadReview(f"request.userInfo.groups: must be a list of at most {MAX_GROUPS} strings")
    return username


_OBJECT_FIELDS = ("metadata", "spec", "status", "data", "binaryData")
_META_STRINGS = ("name", "namespace", "generateName", "resourceVersion", "uid")


def check_object(obj: dict[str, Any], where: str) -> list[tuple[str, str]]:
    """The shape of every field a rule reads, in one place: a wrong type is a BadReview (400: the
    API server never sends one); a size beyond Kubernetes' limits is returned as findings (denied
    before any work). After this, labels and annotations are str -> str, so every cache key built
    from them is hashable and bounded."""
    for field_name in _OBJECT_FIELDS:
        value = obj.get(field_name)
        if value is not None and not isinstance(value, dict):
            raise BadReview(f"{where}.{field_name}: must be an object, not {type(value).__name__}")
    status = obj.get("status") or {}
    if status.get("capacity") is not None and not isinstance(status["capacity"], dict):
        raise BadReview(f"{where}.status.capacity: must be an object")
    meta = objects.meta(obj)
    found: list[tuple[str, str]] = []
    for field_name in _META_STRINGS:
        value = meta.get(field_name)
        if value is not None and not isinstance(value, str):
            raise BadReview(f"{where}.metadata.{field_name}: must be a string")
        if isinstance(value, str) and len(value) > MAX_NAME:
            found.append(("object-limits", f"{where}.metadata.{field_name}: longer than {MAX_NAME} characters"))
    for field_name in ("labels", "annotations"):
        values = meta.get(field_name)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise BadReview(f"{where}.metadata.{field_name}: must be an object of strings")
        total = 0
        for key, value in values.items():
            if not isinstance(value, str):
                raise BadReview(
                    f"{where}.metadata.{field_name}[{_key(key)}]: must be a string, not {type(value).__name__}"
                )
            total += len(key) + len(value)
            if field_name == "labels" and (len(key) > MAX_LABEL_KEY or len(value) > MAX_LABEL_VALUE):
                found.append(
                    (
                        "object-limits",
                        f"{where}.metadata.labels[{_key(key)}]: a label's value is at most "
                        f"{MAX_LABEL_VALUE} characters and its key {MAX_LABEL_KEY}",
                    )
                )
        if field_name == "annotations" and total > MAX_ANNOTATIONS:
            found.append(("object-limits", f"{where}.metadata.annotations: more than {MAX_ANNOTATIONS} bytes in all"))
    managed = meta.get("managedFields")
    if managed is not None and not isinstance(managed, list):
        raise BadReview(f"{where}.metadata.managedFields: must be a list")
    return found


# The fields each kind's rules read beyond metadata, with the JSON type the API (or the GPU Operator's
# ClusterPolicy CRD) gives them. The API server never sends another type there, so one is a BadReview
# naming the field, checked here once, rather than a crash in whichever rule reads it (a string
# spec.mig was a 500). null is the field's absence.
_SHAPES: dict[tuple[str, str], tuple[tuple[tuple[str, ...], type], ...]] = {
    ("nvidia.com", "ClusterPolicy"): (
        (("spec", "mig"), dict),
        (("spec", "mig", "strategy"), str),
        (("spec", "migManager"), dict),
        (("spec", "migManager", "enabled"), bool),
        (("spec", "migManager", "repository"), str),
        (("spec", "migManager", "image"), str),
        (("spec", "migManager", "version"), str),
        (("spec", "migManager", "config"), dict),
        (("spec", "migManager", "config", "name"), str),
        (("spec", "migManager", "config", "default"), str),
        (("status", "namespace"), str),
    ),
    ("", "Pod"): (
        (("spec", "containers"), list),
        (("spec", "initContainers"), list),
        (("spec", "nodeSelector"), dict),
        (("spec", "affinity"), dict),
    ),
}
_JSON_TYPES = {
    dict: "an object",
    list: "a list",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
}


def check_shape(kind: tuple[str, str], obj: dict[str, Any], where: str) -> None:
    """The types of the fields `kind`'s rules read (_SHAPES); raise BadReview naming the first wrong one."""
    for path, want in _SHAPES.get(kind, ()):
        value: object = obj
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and not isinstance(value, want):
            raise BadReview(
                f"{where}.{'.'.join(path)}: must be {_JSON_TYPES[want]}, not {_JSON_TYPES.get(type(value), type(value).__name__)}"
            )


def _key(key: str) -> str:
    """A map key as the field path shows it: "nvidia.com/mig.config", at most 60 characters."""
    text = json.dumps(key)
    return text if len(text) <= 60 else text[:56] + '..."'


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Verdict:
    """What the webhook decides about one object, independent of the request's uid (so it can be
    cached and answered again for the same content)."""

    allowed: bool = True
    code: int = 200
    reason: str = ""
    message: str = ""
    warnings: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()  # rules behind a denial: metrics and audit annotations
    patch: tuple[dict[str, Any], ...] = ()  # RFC 6902 operations (mutating only)

    def body(self, uid: str) -> bytes:
        """The AdmissionReview answering request `uid`: everything but the uid is serialised once
        per verdict (a cached verdict is answered again and again)."""
        return _HEAD + json.dumps(uid).encode() + self._tail

    @property
    def weight(self) -> int:
        """The bytes it holds: its response, kept serialised, and its fields (at most as many again) and
        their objects: the verdict cache's measure."""
        return 2 * len(self._tail) + 1024

    @cached_property
    def _tail(self) -> bytes:
        response: dict[str, Any] = {"allowed": self.allowed}
        if not self.allowed:
            response["status"] = {"code": self.code, "reason": self.reason, "message": self.message}
        if self.warnings:
            response["warnings"] = list(self.warnings)
        if self.rules:
            response["auditAnnotations"] = {"rules": ",".join(self.rules)}
        if self.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(list(self.patch)).encode()).decode()
        return b"," + json.dumps(response, separators=(",", ":")).encode()[1:] + b"}"


_HEAD = (
    json.dumps({"apiVersion": API_VERSION, "kind": KIND}, separators=(",", ":")).encode()[:-1] + b',"response":{"uid":'
)


ALLOW = Verdict()


def allow(warnings: Iterable[str] = (), patch: Sequence[dict[str, Any]] = ()) -> Verdict:
    return Verdict(warnings=tuple(warnings), patch=tuple(patch))


def deny(
    subject: str,
    findings: Sequence[tuple[str, str]],
    *,
    code: int = 422,
    reason: str = "Invalid",
    warnings: Iterable[str] = (),
) -> Verdict:
    """A denial listing every finding as `(rule, text)`; `subject` says what was refused."""
    lines = [f"{subject}: denied by migops ({len(findings)} problem{'s' if len(findings) != 1 else ''})"]
    lines += [f"- {text} [{rule}]" for rule, text in findings]
    message = "\n".join(lines)
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 30].rsplit("\n", 1)[0] + f"\n- ... ({len(findings)} in all)"
    rules = tuple(dict.fromkeys(rule for rule, _ in findings))
    return Verdict(False, code, reason, message, tuple(warnings), rules)


def merge_warnings(items: Iterable[tuple[str, str, str]]) -> tuple[str, ...]:
    """Short warnings from `(rule, where, text)`: one line per rule.

    The first occurrence is shown with its place; repeats (the same finding on eight GPUs, five configs
    with the same name drift) are counted and named after it. Each line is at most MAX_WARNING
    characters, and there are at most MAX_WARNINGS lines.
    """
    groups: dict[str, list[tuple[str, str]]] = {}
    for rule, where, text in items:
        seen = groups.setdefault(rule, [])
        if (where, text) not in seen:
            seen.append((where, text))
    out = []
    for rule, seen in groups.items():
        where, text = seen[0]
        line = f"{where}: {text}" if where else text
        others = list(dict.fromkeys(w for w, _ in seen[1:] if w and w != where))
        suffix = f" [{rule}]"
        if len(seen) > 1:
            suffix = f" [{rule}; +{len(seen) - 1} similar]"
            named = ", ".join(others[:2]) + (" ..." if len(others) > 2 else "")
            if named and MAX_WARNING - len(suffix) - len(named) - 2 >= 50:
                suffix = f" [{rule}; +{len(seen) - 1} similar: {named}]"
        out.append(_fit(line, suffix))
    if len(out) > MAX_WARNINGS:
        out = out[: MAX_WARNINGS - 1] + [f"{len(out) - MAX_WARNINGS + 1} more kinds of warning (run migops validate)"]
    return tuple(out)


def _fit(line: str, suffix: str) -> str:
    """`line` shortened so that line + suffix fits one warning; the suffix is cut last."""
    room = MAX_WARNING - len(suffix)
    if room < 40:
        return shorten(line + suffix)
    return shorten(line, room) + suffix


def shorten(text: str, width: int = MAX_WARNING) -> str:
    """One line of at most `width` characters, cut at a word boundary."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    return textwrap.shorten(flat, width=width, placeholder=" ...") or flat[: width - 4] + " ..."


def escape_pointer(key: str) -> str:
    """A JSON Pointer segment (RFC 6901): annotation keys hold '/'."""
    return key.replace("~", "~0").replace("/", "~1")


__all__ = [
    "ALLOW",
    "BadReview",
    "Request",
    "Verdict",
    "allow",
    "check_object",
    "check_shape",
    "decode",
    "deny",
    "escape_pointer",
    "merge_warnings",
    "parse_review",
    "shorten",
    "too_deep",
]
