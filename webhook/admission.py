"""AdmissionReview v1 in and out: the envelope checks, the verdict, and the response body.

Everything here is pure. A request that is not a well-formed AdmissionReview is a client error
(`BadReview`, answered 400 with a message); anything about the object itself is a verdict
(allowed or denied, with warnings), answered 200 as the API server expects.
"""
from __future__ import annotations

import base64
import json
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_WARNING = 120  # the API server's advice; longer ones may be truncated
MAX_WARNINGS = 10  # the API server drops warnings past 4096 characters in all
MAX_MESSAGE = 4000  # status.message: enough for every problem of a bad config, bounded for the API server
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


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


def decode(body: bytes) -> object:
    """The JSON body: orjson (a quarter of the stdlib's time on a 26 KB review), and the stdlib for
    what orjson refuses but JSON allows (a lone surrogate escape, an integer beyond 64 bits), so the
    answer to such content is the same denial as before, not a 400. Raises ValueError when the body
    is not JSON at all, RecursionError when it nests too deep for the stdlib."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)


def parse_review(doc: object) -> Request:
    """Check the envelope of a decoded AdmissionReview; raise BadReview naming the field."""
    if not isinstance(doc, dict):
        raise BadReview(f"body must be a JSON object (an AdmissionReview), not {type(doc).__name__}")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise BadReview(f"apiVersion/kind must be {API_VERSION}/{KIND}, not "
                        f"{_short(doc.get('apiVersion'))}/{_short(doc.get('kind'))}")
    req = doc.get("request")
    if not isinstance(req, dict):
        raise BadReview("request: missing or not an object")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > 128:
        raise BadReview("request.uid: missing, empty or not a string of at most 128 characters")
    kind = req.get("kind")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str) or not isinstance(kind.get("group", ""), str):
        raise BadReview("request.kind: must be an object with group, version and kind")
    operation = req.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        raise BadReview(f"request.operation: must be one of {', '.join(sorted(OPERATIONS))}, not {_short(operation)}")
    obj, old = req.get("object"), req.get("oldObject")
    for field_name, value in (("object", obj), ("oldObject", old)):
        if value is not None and not isinstance(value, dict):
            raise BadReview(f"request.{field_name}: must be an object or null")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise BadReview(f"request.object: required for {operation}")
    name, namespace = req.get("name") or "", req.get("namespace") or ""
    if not isinstance(name, str) or not isinstance(namespace, str):
        raise BadReview("request.name and request.namespace must be strings")
    dry_run = req.get("dryRun", False)
    if not isinstance(dry_run, bool) and dry_run is not None:
        raise BadReview("request.dryRun: must be a boolean")
    if not name:
        name = str(((obj or old or {}).get("metadata") or {}).get("name") or "")
    return Request(uid, kind["kind"], kind.get("group", ""), operation, name, namespace, obj, old,
                   bool(dry_run), req)


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


_HEAD = json.dumps({"apiVersion": API_VERSION, "kind": KIND}, separators=(",", ":")).encode()[:-1] + b',"response":{"uid":'


ALLOW = Verdict()


def allow(warnings: Iterable[str] = (), patch: Sequence[dict[str, Any]] = ()) -> Verdict:
    return Verdict(warnings=tuple(warnings), patch=tuple(patch))


def deny(subject: str, findings: Sequence[tuple[str, str]], *, code: int = 422, reason: str = "Invalid",
         warnings: Iterable[str] = ()) -> Verdict:
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


def labels(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """metadata.labels of an object from a review, {} when absent or malformed."""
    meta = (obj or {}).get("metadata")
    found = meta.get("labels") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def annotations(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    meta = (obj or {}).get("metadata")
    found = meta.get("annotations") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def escape_pointer(key: str) -> str:
    """A JSON Pointer segment (RFC 6901): annotation keys hold '/'."""
    return key.replace("~", "~0").replace("/", "~1")


__all__ = ["ALLOW", "BadReview", "Request", "Verdict", "allow", "annotations", "decode", "deny", "escape_pointer",
           "labels", "merge_warnings", "parse_review", "shorten"]
