"""The project's one reader for untrusted YAML and JSON: mig-parted's reading, within migops's bounds.

mig-parted (and kubectl, for each document of a manifest) reads a file with sigs.k8s.io/yaml: go-yaml v2
decodes the first document with YAML 1.1 rules, the value is converted to JSON and encoding/json decodes
that. This module reproduces the first two steps exactly, so a value here is the JSON the node's parser
decodes (mig/spec.py does the third step):

* scalars resolve as go-yaml v2's `resolve()`: `y`/`Y`/`yes`/`on`... are booleans, `0o7`/`0x7`/`0b1`/`07`
  are integers, `08`, `7.` and `1e2` are floats, `1:00` is a string (no base 60), an integer beyond 64 bits
  is a float, timestamps stay strings, unknown tags (`!foo v1`) are ignored;
* merge keys (`<<`) are applied in document order, as go-yaml does (a merge written after a key replaces
  it); duplicate keys: the last one would win;
* non-string keys become the JSON string of their value (`y:` -> "true", `0x10:` -> "16", `1.5:` -> "1.5"
  formatted as a float32, `2024-01-01:` stays "2024-01-01"); a null key or one of 2^63..2^64-1 is an error;
  a float that is NaN or infinite anywhere in the document is an error (JSON has no such numbers);
* only the first document is read (`read_first`), or every document (`read_stream`, kubectl's reading of
  a manifest stream); a `%YAML` directive other than 1.1 is refused.

migops adds bounds of its own (documented rules, see docs/config-rules.md): input size, nesting depth,
nodes after alias expansion, valid UTF-8, and no duplicate keys (go-yaml silently keeps the last, and two
keys that become the same JSON key make mig-parted's choice random). Beside each value the reader keeps
an index from problem path to line and column, so problems found later can point at the text.
"""
from __future__ import annotations

import base64
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple
from decimal import Decimal

import yaml

from migops.mig.gcpause import paused_gc
from migops.mig.problems import MigError, Problem, index_path, key_path, parent_path

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Limits:
    """Bounds for one input. 1 MiB is the most a ConfigMap can hold anyway."""

    max_bytes: int = 1 << 20
    max_depth: int = 32
    max_nodes: int = 100_000  # nodes decoded, aliases counted each time they are used (whole input)


DEFAULT_LIMITS = Limits()


class Location(NamedTuple):
    """1-based line and column (in characters) of a key, a sequence item or a document (a tuple: one is
    made per node, and a tuple is several times cheaper to make than a frozen dataclass)."""

    line: int
    column: int


@dataclass(frozen=True)
class Scalar:
    """How a scalar was written, kept for values whose reading may surprise (see `Document.surprises`)."""

    text: str  # the source text of the scalar (after YAML unquoting/folding)
    kind: str  # "bool", "int", "float", "null", "tagged", "key"
    style: str  # "" plain, '"', "'", "|", ">"


@dataclass(frozen=True)
class Document:
    """One YAML document as mig-parted (or kubectl) sees it."""

    value: object  # JSON value: dict[str, ...], list, str, int, float, bool or None
    locations: Mapping[str, Location]  # problem path -> where its key (or item) is written
    surprises: Mapping[str, Scalar]  # path -> scalars whose reading is not what they look like
    start: Location  # where the document's content begins
    index: int = 0  # position in the stream
    rest: Location | None = None  # read_first: where a further, non-empty document starts (mig-parted ignores it)
    # path -> (line, column, style) of string scalars, to map a block scalar's lines back to the file
    strings: Mapping[str, tuple[int, int, str]] = field(default_factory=dict)

    def locate(self, path: str) -> Location | None:
        """Where the path (or its nearest ancestor present in the index) is written."""
        p: str | None = path
        while p is not None:
            loc = self.locations.get(p)
            if loc is not None:
                return loc
            p = parent_path(p)
        return None


def _fail(rule: str, message: str, path: str = "", mark: object | None = None) -> MigError:
    line = column = None
    if mark is not None:
        line, column = mark.line + 1, mark.column + 1  # type: ignore[attr-defined]
    return MigError([Problem(path, rule, message, "error", line, column)])


# ---------------------------------------------------------------------------------------------------
# go-yaml v2's scalar resolution (resolve.go)

_T = "tag:yaml.org,2002:"
STR, BOOL, INT, FLOAT, NULL, TIMESTAMP, BINARY, MERGE = (_T + s for s in (
    "str", "bool", "int", "float", "null", "timestamp", "binary", "merge"))
_RESOLVABLE = frozenset(("", STR, BOOL, INT, FLOAT, NULL, TIMESTAMP))

_NAN = float("nan")
_INF = float("inf")
_MAP: dict[str, tuple[str, object]] = {}
for _words, _item in (
        (("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), (BOOL, True)),
        (("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), (BOOL, False)),
        (("", "~", "null", "Null", "NULL"), (NULL, None)),
        ((".nan", ".NaN", ".NAN"), (FLOAT, _NAN)),
        ((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), (FLOAT, _INF)),
        (("-.inf", "-.Inf", "-.INF"), (FLOAT, -_INF)),
        (("<<",), (MERGE, "<<"))):
    for _w in _words:
        _MAP[_w] = _item
_HINT = {c: "S" for c in "+-"} | {c: "D" for c in "0123456789"} | {c: "M" for c in "yYnNtTfFoO~"} | {".": "."}

_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?\Z")
_DOT_FLOAT = re.compile(r"\.[0-9]+([eE][-+]?[0-9]+)?\Z")
_DECIMAL = re.compile(r"[1-9][0-9]{0,17}\Z|0\Z")  # fast path: plainly an int64, no prefix
_DIGITS = {c: i for i, c in enumerate("0123456789abcdefghijklmnopqrstuvwxyz")}
_DIGITS.update({c.upper(): i for c, i in _DIGITS.items() if c.isalpha()})
_INT64 = 1 << 63
_UINT64 = 1 << 64


def _parse_uint(s: str) -> int | None:
    """Go's strconv.ParseUint(s, 0, 64) without underscores: None on a syntax or range error."""
    if not s:
        return None
    base = 10
    if s[0] == "0":
        if len(s) >= 3 and s[1] in "bB":
            base, s = 2, s[2:]
        elif len(s) >= 3 and s[1] in "oO":
            base, s = 8, s[2:]
        elif len(s) >= 3 and s[1] in "xX":
            base, s = 16, s[2:]
        else:
            base, s = 8, s[1:]
    digits = s.lstrip("0")
    if len(digits) > 64:  # more than 64 binary digits: beyond uint64 in any base (if digits are valid)
        if any(_DIGITS.get(c, 99) >= base for c in s):
            return None
        return None
    n = 0
    for c in s:
        d = _DIGITS.get(c, 99)
        if d >= base:
            return None
        n = n * base + d
    return n if n < _UINT64 else None


def _parse_int(s: str) -> int | None:
    """Go's strconv.ParseInt(s, 0, 64) without underscores."""
    if not s:
        return None
    neg = s[0] == "-"
    if s[0] in "+-":
        s = s[1:]
    n = _parse_uint(s)
    if n is None:
        return None
    if neg:
        return -n if n <= _INT64 else None
    return n if n < _INT64 else None


def _underscore_ok(s: str) -> bool:
    """Go's strconv underscoreOK: underscores only between digits (or after a base prefix)."""
    saw = "^"
    i = 0
    if s[:1] in ("+", "-"):
        s = s[1:]
    hexa = False
    if len(s) >= 2 and s[0] == "0" and s[1] in "bBoOxX":
        i, saw, hexa = 2, "0", s[1] in "xX"
    while i < len(s):
        c = s[i]
        if "0" <= c <= "9" or hexa and c in "abcdefABCDEF":
            saw = "0"
        elif c == "_":
            if saw != "0":
                return False
            saw = "_"
        else:
            if saw == "_":
                return False
            saw = "!"
        i += 1
    return saw != "_"


_TS_DATE = re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})")
_TS_TIME = re.compile(r"([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:[.,][0-9]+)?")
_TS_ZONE = re.compile(r"Z|[+-][0-9]{2}:[0-9]{2}")


def _is_timestamp(s: str) -> bool:
    """go-yaml's parseTimestamp: time.Parse with 2006-1-2[Tt ]15:4:5.999999999[Z07:00] or 2006-1-2."""
    m = _TS_DATE.match(s)
    if not m:
        return False
    year, month, day = (int(g) for g in m.groups())
    if not 1 <= month <= 12:
        return False
    days = (31, 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28,
            31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[month - 1]
    if not 1 <= day <= days:
        return False
    rest = s[m.end():]
    if not rest:
        return True
    if rest[0] not in "Tt ":
        return False
    t = _TS_TIME.match(rest, 1)
    if not t or int(t.group(1)) > 23 or int(t.group(2)) > 59 or int(t.group(3)) > 59:
        return False
    zone = rest[t.end():]
    if rest[0] == " ":
        return not zone
    return bool(_TS_ZONE.fullmatch(zone))


def _resolve_untagged(tag: str, text: str) -> tuple[str, object]:
    hint = _HINT.get(text[0], "") if text else "N"
    if hint and tag != STR:
        item = _MAP.get(text)
        if item is not None:
            return item
        if hint == ".":
            if "_" not in text or _underscore_ok(text):
                plain = text.replace("_", "")
                if _DOT_FLOAT.match(plain):
                    f = float(plain)
                    if not math.isinf(f):
                        return FLOAT, f
        elif hint in "DS":
            if tag in ("", TIMESTAMP) and _is_timestamp(text):
                return TIMESTAMP, text
            plain = text.replace("_", "")
            n = _parse_int(plain)
            if n is not None:
                return INT, n
            if plain[:1] not in "+-":
                n = _parse_uint(plain)
                if n is not None:
                    return INT, n  # 2^63..2^64-1: go-yaml's uint64
            if _YAML_FLOAT.match(plain):
                f = float(plain)
                if not math.isinf(f):
                    return FLOAT, f
            # go-yaml's own 0b/-0b fallbacks accept nothing ParseInt(s, 0, 64) refused above.
    return STR, text


def _short(tag: str) -> str:
    return "!!" + tag[len(_T):] if tag.startswith(_T) else tag


def resolve(tag: str, text: str) -> tuple[str, object]:
    """go-yaml v2's resolve(tag, in): the resolved tag and value (timestamps stay their text)."""
    if tag not in _RESOLVABLE:
        return tag, text
    rtag, value = _resolve_untagged(tag, text)
    if tag in ("", rtag, STR):
        return rtag, value
    if tag == FLOAT and rtag == INT:
        return FLOAT, float(value)  # type: ignore[arg-type]
    raise ValueError(f"cannot decode {_short(rtag)} `{text}` as a {_short(tag)}")


def _go_string(data: bytes) -> str:
    """A Go string as encoding/json writes it: each byte that is not valid UTF-8 becomes U+FFFD."""
    return "".join("\ufffd" if "\udc80" <= c <= "\udcff" else c
                   for c in data.decode("utf-8", "surrogateescape"))


# ---------------------------------------------------------------------------------------------------
# sigs.k8s.io/yaml's conversion to JSON


def float32_text(f: float) -> str:
    """strconv.FormatFloat(f, 'g', -1, 32), with go-yaml's names for infinities and NaN: how
    sigs.k8s.io/yaml spells a float map key."""
    if math.isnan(f):
        return ".nan"
    try:
        f32 = struct.unpack("f", struct.pack("f", f))[0]
    except OverflowError:
        f32 = math.copysign(_INF, f)
    if math.isinf(f32):
        return ".inf" if f32 > 0 else "-.inf"
    if f32 == 0:
        return "-0" if math.copysign(1.0, f32) < 0 else "0"
    for prec in range(1, 10):
        text = f"{f32:.{prec - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == f32:
            break
    mantissa, exp_text = text.split("e")
    neg = mantissa.startswith("-")
    digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    exp = int(exp_text)
    sign = "-" if neg else ""
    if exp < -4 or exp >= 6:
        body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{body}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    point = exp + 1  # digits before the decimal point
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def json_int(value: object) -> int | None:
    """The int that encoding/json decodes from this JSON value into a Go int, or None if it refuses.

    A YAML float reaches JSON as the shortest text that reads back as the same float64, in plain
    notation below 1e21: `7.0` and `1e2` become 7 and 100, `7.5` and `1e21` stay non-integers."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else None
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value) or not value.is_integer() or abs(value) >= 1e21:
            return None
        n = int(Decimal(repr(value)))
        return n if -_INT64 <= n < _INT64 else None
    return None


def json_key(value: object) -> str:
    """The JSON string sigs.k8s.io/yaml makes of a map key that a Python loader produced."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if value >= _INT64:
            raise ValueError(f"unsupported map key of type: uint64, key: {value}")
        return str(value)
    if isinstance(value, float):
        return float32_text(value)
    raise ValueError(f"unsupported map key of type: {type(value).__name__}, key: {value!r}")


def to_json_value(value: object) -> object:
    """An already-loaded Python value (e.g. from PyYAML or json) as sigs.k8s.io/yaml converts it:
    keys become strings; a NaN or infinite float is refused. Raises ValueError."""
    if isinstance(value, Mapping):
        return {json_key(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise ValueError(f"json: unsupported value: {value}")
    if value is None or isinstance(value, (str, int, float)):
        return value
    raise ValueError(f"unsupported value of type {type(value).__name__}")


# ---------------------------------------------------------------------------------------------------
# Composing: libyaml's events (the same parser go-yaml v2 ports) into nodes, within the bounds


class _Node:
    __slots__ = ("kind", "tag", "value", "plain", "style", "line", "col", "anchor", "target")

    def __init__(self, kind: str, tag: str, line: int, col: int) -> None:
        self.kind = kind  # "scalar", "seq", "map", "alias"
        self.tag = tag
        self.line = line
        self.col = col
        self.value: object = None  # scalar: text; seq: items; map: flat [k, v, k, v, ...]
        self.plain = False  # go-yaml's `implicit`: a plain scalar without a tag (or with `!`)
        self.style = ""
        self.anchor = ""
        self.target: _Node | None = None  # alias


def _syntax(exc: yaml.YAMLError, text: str) -> MigError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None and mark.index >= len(text.rstrip()):
        # at the end of the stream: point at the end of the last line that has text, not past it
        body = text.rstrip()
        last = body.rsplit("\n", 1)[-1]
        mark = _Mark.at(body.count("\n"), len(last))
    return _fail("yaml-syntax", f"not valid YAML: {' '.join(str(exc).split())}", mark=mark)


class _Composer:
    """Turns the event stream into one node tree per document (go-yaml's parser.go)."""

    def __init__(self, text: str, limits: Limits) -> None:
        self.text = text
        self.loader = _Loader(text)
        self.limits = limits
        self.started = False

    def close(self) -> None:
        self.loader.dispose()

    def _event(self) -> yaml.Event:
        try:
            return self.loader.get_event()
        except yaml.YAMLError as exc:
            raise _syntax(exc, self.text) from None

    def _peek(self) -> yaml.Event:
        try:
            return self.loader.peek_event()
        except yaml.YAMLError as exc:
            raise _syntax(exc, self.text) from None

    def has_document(self) -> bool:
        if not self.started:
            self._event()  # StreamStart
            self.started = True
        return not isinstance(self._peek(), yaml.StreamEndEvent)

    def rest(self) -> Location | None:
        """After a document: where the next one starts, unless nothing but empty documents follow.
        Whatever follows is only looked at, never decoded: mig-parted does not read it."""
        start = None
        try:
            if not self.has_document():
                return None
            start = self._peek().start_mark
            while True:
                event = self._event()
                if isinstance(event, yaml.StreamEndEvent):
                    return None
                if isinstance(event, (yaml.DocumentStartEvent, yaml.DocumentEndEvent)):
                    continue
                if isinstance(event, yaml.ScalarEvent) and event.value == "" and event.implicit[0] \
                        and not event.tag and event.anchor is None:
                    continue
                return Location(start.line + 1, start.column + 1)
        except MigError as exc:
            if start is not None:
                return Location(start.line + 1, start.column + 1)
            p = exc.problems[0]
            return Location(p.line or 1, p.column or 1)

    def document(self) -> _Node:
        """The next document's root node (an empty document is a null scalar)."""
        start = self._event()
        version = getattr(start, "version", None)
        if version is not None and tuple(version) != (1, 1):
            raise _fail("yaml-syntax", f"not valid YAML: found incompatible YAML document (%YAML "
                        f"{version[0]}.{version[1]}; mig-parted reads only YAML 1.1)", mark=start.start_mark)
        anchors: dict[str, _Node] = {}
        stack: list[_Node] = []
        root: _Node | None = None
        max_depth = self.limits.max_depth
        try:
            return self._compose(anchors, stack, root, max_depth)
        except yaml.YAMLError as exc:
            raise _syntax(exc, self.text) from None

    def _compose(self, anchors: dict[str, _Node], stack: list[_Node], root: _Node | None, max_depth: int) -> _Node:
        get = self.loader.get_event
        while True:
            event = get()
            etype = type(event)
            mark = event.start_mark
            if etype is yaml.ScalarEvent:
                if len(stack) >= max_depth:
                    raise _fail("yaml-too-deep", f"document is nested deeper than {max_depth} levels",
                                mark=mark)
                node = _Node("scalar", event.tag or "", mark.line, mark.column)
                node.value = event.value
                node.plain = event.implicit[0]
                if event.style:
                    node.style = event.style
            elif etype is yaml.MappingStartEvent or etype is yaml.SequenceStartEvent:
                if len(stack) >= max_depth:
                    raise _fail("yaml-too-deep", f"document is nested deeper than {max_depth} levels",
                                mark=mark)
                node = _Node("map" if etype is yaml.MappingStartEvent else "seq", event.tag or "",
                             mark.line, mark.column)
                node.value = []
            elif etype is yaml.AliasEvent:
                target = anchors.get(event.anchor)
                if target is None:
                    raise _fail("yaml-syntax", f"not valid YAML: unknown anchor '{event.anchor}' referenced",
                                mark=mark)
                node = _Node("alias", "", mark.line, mark.column)
                node.anchor = event.anchor
                node.target = target
            elif etype is yaml.MappingEndEvent or etype is yaml.SequenceEndEvent:
                done = stack.pop()
                if not stack:
                    root = done
                continue
            elif etype is yaml.DocumentEndEvent:
                assert root is not None
                return root
            else:  # pragma: no cover - libyaml produces no other event inside a document
                raise _fail("yaml-syntax", f"not valid YAML: unexpected {etype.__name__}", mark=mark)
            if etype is not yaml.AliasEvent and event.anchor is not None:
                anchors[event.anchor] = node  # a later anchor of the same name replaces it, as in go-yaml
            if stack:
                stack[-1].value.append(node)  # type: ignore[union-attr]
            elif node.kind == "scalar" or node.kind == "alias":
                root = node
            if node.kind == "map" or node.kind == "seq":
                stack.append(node)


# ---------------------------------------------------------------------------------------------------
# Decoding: go-yaml's decode.go into interface{}, then sigs.k8s.io/yaml's JSON conversion


def _allowed_alias_ratio(count: int) -> float:
    if count <= 400_000:
        return 0.99
    if count >= 4_000_000:
        return 0.10
    return 0.99 - 0.89 * (count - 400_000) / 3_600_000


_KEY_KINDS = {str: "string", bool: "bool", int: "int", float: "float"}


class _Decoder:
    def __init__(self, limits: Limits, budget: list[int]) -> None:
        self.limits = limits
        self.budget = budget  # [nodes left], shared by every document of one input
        self.count = 0
        self.alias_count = 0
        self.alias_depth = 0
        self.active: set[int] = set()
        self.locations: dict[str, Location] = {}
        self.surprises: dict[str, Scalar] = {}
        self.strings: dict[str, tuple[int, int, str]] = {}
        self.non_finite: list[tuple[str, _Node]] = []

    def _tick(self, node: _Node) -> None:
        self.count += 1
        if self.alias_depth:
            self.alias_count += 1
        if (self.alias_count > 100 and self.count > 1000
                and self.alias_count / self.count > _allowed_alias_ratio(self.count)):
            raise _fail("yaml-syntax", "not valid YAML: document contains excessive aliasing "
                        "(go-yaml refuses it)", mark=_Mark(node))
        self.budget[0] -= 1
        if self.budget[0] < 0:
            raise _fail("yaml-too-large", f"document expands to more than {self.limits.max_nodes} nodes "
                        "(aliases count each time they are used)", mark=_Mark(node))

    def _not_recursive(self, alias: _Node, path: str) -> None:
        """go-yaml refuses an alias met again while its own value is being decoded."""
        if id(alias) in self.active:
            raise _fail("yaml-syntax", f"not valid YAML: anchor '{alias.anchor}' value contains itself",
                        path, _Mark(alias))

    def scalar(self, node: _Node, path: str) -> tuple[str, object]:
        """(resolved tag, value) of a scalar node, as go-yaml decodes it into interface{}."""
        text: str = node.value  # type: ignore[assignment]
        tag = node.tag
        if not tag and not node.plain:
            return STR, text  # quoted, no tag
        if not tag and text in ("", "~", "null", "Null", "NULL") and node.plain:
            return NULL, None
        if not tag and node.plain and _DECIMAL.match(text):
            return INT, int(text)  # the common case, without the general resolver
        try:
            rtag, value = resolve(tag, text)
        except ValueError as exc:
            raise _fail("yaml-syntax", f"not valid YAML: {exc}", path, _Mark(node)) from None
        if rtag == BINARY:
            compact = text.replace("\n", "").replace("\r", "")
            try:
                value = _go_string(base64.b64decode(compact, validate=True))
            except ValueError:
                raise _fail("yaml-syntax", "not valid YAML: !!binary value contains invalid base64 data",
                            path, _Mark(node)) from None
        return rtag, value

    def decode(self, node: _Node, path: str, depth: int) -> object:
        self._tick(node)
        if depth > self.limits.max_depth:
            raise _fail("yaml-too-deep", f"document is nested deeper than {self.limits.max_depth} levels "
                        "(counting what aliases expand to)", path, _Mark(node))
        kind = node.kind
        if kind == "scalar":
            rtag, value = self.scalar(node, path)
            if rtag == STR:
                self.strings[path] = (node.line + 1, node.col + 1, node.style)
                return value
            if rtag == NULL:
                self.surprises[path] = Scalar(node.value, "null", node.style)  # type: ignore[arg-type]
                return None
            if rtag == BOOL:
                if node.value not in ("true", "false"):
                    self.surprises[path] = Scalar(node.value, "bool", node.style)  # type: ignore[arg-type]
                return value
            if rtag == INT:
                if str(value) != node.value:  # not as it reads: a prefix, a sign, a leading zero, _
                    self.surprises[path] = Scalar(node.value, "int", node.style)  # type: ignore[arg-type]
                return value
            if rtag == FLOAT:
                self.surprises[path] = Scalar(node.value, "float", node.style)  # type: ignore[arg-type]
                if math.isnan(value) or math.isinf(value):  # type: ignore[arg-type]
                    self.non_finite.append((path, node))
                return value
            # timestamps, custom tags, merge written as a value, !!binary: strings
            if node.tag and node.tag not in _RESOLVABLE and node.tag not in ("!", BINARY):
                self.surprises[path] = Scalar(node.value, "tagged", node.style)  # type: ignore[arg-type]
            self.strings[path] = (node.line + 1, node.col + 1, node.style)
            return value if isinstance(value, str) else node.value
        if kind == "alias":
            target = node.target
            assert target is not None
            self._not_recursive(node, path)
            self.active.add(id(node))
            self.alias_depth += 1
            try:
                return self.decode(target, path, depth)
            finally:
                self.alias_depth -= 1
                self.active.discard(id(node))
        if kind == "seq":
            out_list = []
            locations = self.locations
            append = out_list.append
            for i, item in enumerate(node.value):  # type: ignore[arg-type]
                item_path = f"{path}[{i}]"
                locations[item_path] = Location(item.line + 1, item.col + 1)
                if item.kind == "scalar" and item.plain and not item.tag and not self.alias_depth \
                        and depth < self.limits.max_depth and _DECIMAL.match(item.value) and self.budget[0] > 0:
                    self.count += 1  # a plain decimal int64: the common case, as decode() would do it
                    self.budget[0] -= 1
                    append(int(item.value))
                    continue
                append(self.decode(item, item_path, depth + 1))
            return out_list
        out: dict[str, object] = {}
        self.mapping(node, path, depth, out, {}, False)
        return out

    def key(self, node: _Node, path: str) -> tuple[tuple[str, object], _Node]:
        """A key decoded into interface{}: (Go type letter, value), and the scalar node it came from."""
        self._tick(node)
        target = node
        if node.kind == "alias":
            self._not_recursive(node, path)
            target = node.target  # type: ignore[assignment]
            self.alias_depth += 1
            self._tick(target)
            self.alias_depth -= 1
        if target.kind != "scalar":
            raise _fail("yaml-syntax", "not valid YAML: invalid map key: a mapping or sequence cannot be a key",
                        path, _Mark(node))
        rtag, value = self.scalar(target, path)
        if rtag == NULL:
            return ("n", None), target
        if isinstance(value, (bool, int, float)):
            return (_KEY_KINDS[type(value)][0], value), target
        return ("s", value if isinstance(value, str) else target.value), target

    def mapping(self, node: _Node, path: str, depth: int, out: dict[str, object],
                owners: dict[str, tuple[object, bool]], merged: bool) -> None:
        """Decode `node`'s pairs into `out` in document order; `owners` maps each JSON key of `out` to
        (Go key, set by the outer mapping itself) so collisions and merge overrides can be told."""
        pairs: list[_Node] = node.value  # type: ignore[assignment]
        seen: dict[object, _Node] = {}
        locations = self.locations
        for i in range(0, len(pairs), 2):
            knode, vnode = pairs[i], pairs[i + 1]
            if knode.kind == "scalar" and knode.value == "<<" and (knode.plain or knode.tag == MERGE):
                self.merge(vnode, path, depth, out, owners)
                continue
            gokey, source = self.key(knode, path)
            kind, kvalue = gokey
            if kind == "s":
                jkey = kvalue
            elif kind == "b":
                jkey = "true" if kvalue else "false"
            elif kind == "i":
                if kvalue >= _INT64:
                    raise _fail("yaml-syntax", f"not valid YAML for mig-parted: the key {source.value!r} is an "
                                "integer beyond int64 (go-yaml's uint64), which sigs.k8s.io/yaml cannot turn "
                                "into a JSON key", path, _Mark(knode))
                jkey = str(kvalue)
            elif kind == "f":
                jkey = float32_text(kvalue)
            else:
                raise _fail("yaml-syntax", "not valid YAML for mig-parted: a mapping key is null (empty or ~), "
                            "which sigs.k8s.io/yaml cannot turn into a JSON key", path, _Mark(knode))
            child = key_path(path, jkey)
            first = seen.get(gokey)
            if first is not None:
                same = "" if first.value == source.value else f" ({first.value!r} and {source.value!r} are the same key in YAML 1.1)"
                raise _fail("duplicate-key", f"key {source.value!r} appears twice in one mapping (lines "
                            f"{first.line + 1} and {knode.line + 1}){same}; mig-parted would silently keep the "
                            "last one", child, _Mark(knode))
            seen[gokey] = source
            owner = owners.get(jkey)
            if owner is not None and owner[0] != gokey:
                raise _fail("duplicate-key", f"key {source.value!r} and another key of this mapping both become "
                            f"{jkey!r} as mig-parted reads them (YAML 1.1 types, then JSON keys); which of the two "
                            "it keeps changes from run to run", child, _Mark(knode))
            if kind != "s" and source.value != jkey:
                self.surprises[child] = Scalar(source.value, "key", source.style)  # type: ignore[arg-type]
            if merged and owner is not None and owner[1]:
                self.surprises[child] = Scalar(source.value, "merge-override", source.style)  # type: ignore[arg-type]
            locations[child] = Location(knode.line + 1, knode.col + 1)
            out[jkey] = self.decode(vnode, child, depth + 1)
            owners[jkey] = (gokey, not merged)

    def merge(self, node: _Node, path: str, depth: int, out: dict[str, object],
              owners: dict[str, tuple[object, bool]]) -> None:
        """go-yaml's merge: a mapping, an alias of one, or a sequence of them (the earlier ones win)."""
        def want_map() -> MigError:
            return _fail("yaml-syntax", "not valid YAML: map merge requires map or sequence of maps as the value",
                         path, _Mark(node))

        def merge_one(item: _Node) -> None:
            self._tick(item)
            target = item
            if item.kind == "alias":
                self._not_recursive(item, path)
                target = item.target  # type: ignore[assignment]
                if target.kind != "map":
                    raise want_map()
                self.active.add(id(item))
                self.alias_depth += 1
                self._tick(target)
                try:
                    self.mapping(target, path, depth, out, owners, True)
                finally:
                    self.alias_depth -= 1
                    self.active.discard(id(item))
                return
            self.mapping(target, path, depth, out, owners, True)

        if node.kind == "map":
            merge_one(node)
        elif node.kind == "alias":
            if node.target is not None and node.target.kind != "map":
                raise want_map()
            merge_one(node)
        elif node.kind == "seq":
            items: list[_Node] = node.value  # type: ignore[assignment]
            for item in items:
                if item.kind == "alias" and item.target is not None and item.target.kind != "map" \
                        or item.kind not in ("alias", "map"):
                    raise want_map()
            for item in reversed(items):
                merge_one(item)
        else:
            raise want_map()


class _Mark:
    """A node's position in the shape of a libyaml mark (0-based)."""

    __slots__ = ("line", "column")

    def __init__(self, node: _Node) -> None:
        self.line = node.line
        self.column = node.col

    @classmethod
    def at(cls, line: int, column: int) -> _Mark:
        mark = cls.__new__(cls)
        mark.line, mark.column = line, column
        return mark


def _check_text(text: str | bytes, limits: Limits) -> str:
    size = len(text)
    if isinstance(text, str) and size <= limits.max_bytes:
        size = len(text.encode("utf-8", "surrogatepass"))  # the limit is in bytes, as a ConfigMap's is
    if size > limits.max_bytes:
        raise _fail("input-too-large", f"input is {size} bytes; the limit is {limits.max_bytes} bytes")
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _fail("not-utf8", f"input is not UTF-8 text: {exc}") from None
    try:  # a lone surrogate (e.g. from a JSON "\ud800" escape) makes libyaml raise UnicodeEncodeError
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _fail("not-utf8", f"input is not valid Unicode text: {exc}") from None
    return text


def _decode_document(root: _Node, index: int, limits: Limits, budget: list[int]) -> Document:
    decoder = _Decoder(limits, budget)
    decoder.count = 1  # go-yaml counts the document node too
    decoder.locations[""] = Location(root.line + 1, root.col + 1)
    try:
        value = decoder.decode(root, "", 1)
    except RecursionError:  # pragma: no cover - depth is bounded well below Python's limit
        raise _fail("yaml-too-deep", f"document is nested deeper than {limits.max_depth} levels") from None
    if decoder.non_finite:
        bad = _non_finite_path(value, "")
        if bad is not None:  # (a later duplicate or merge may have replaced every one of them)
            loc = Document(value, decoder.locations, {}, Location(1, 1)).locate(bad)
            raise MigError([Problem(bad, "yaml-syntax", "not valid YAML for mig-parted: a float that is NaN or "
                                    "infinite (.nan, .inf), which JSON cannot hold (json: unsupported value)",
                                    "error", loc.line if loc else None, loc.column if loc else None)])
    return Document(value, decoder.locations, decoder.surprises, Location(root.line + 1, root.col + 1), index,
                    strings=decoder.strings)


def _non_finite_path(value: object, path: str) -> str | None:
    """The path of the first NaN or infinite float left in a decoded value."""
    if isinstance(value, float):
        return path if math.isnan(value) or math.isinf(value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _non_finite_path(v, key_path(path, k))
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _non_finite_path(v, index_path(path, i))
            if found is not None:
                return found
    return None


@paused_gc()
def read_first(text: str | bytes, limits: Limits = DEFAULT_LIMITS) -> Document:
    """The first document, exactly as mig-parted reads a config file; `more` tells whether the file goes
    on past it (mig-parted ignores the rest). An empty input reads as null."""
    text = _check_text(text, limits)
    composer = _Composer(text, limits)
    try:
        if not composer.has_document():
            return Document(None, {"": Location(1, 1)}, {}, Location(1, 1))
        root = composer.document()
        doc = _decode_document(root, 0, limits, [limits.max_nodes])
        rest = composer.rest()
        if rest is not None:
            doc = Document(doc.value, doc.locations, doc.surprises, doc.start, 0, rest, doc.strings)
        return doc
    finally:
        composer.close()


@paused_gc()
def read_stream(text: str | bytes, limits: Limits = DEFAULT_LIMITS) -> list[Document]:
    """Every document of a stream, each read as sigs.k8s.io/yaml reads one (kubectl's reading of a
    manifest file). The node budget covers the whole input."""
    text = _check_text(text, limits)
    composer = _Composer(text, limits)
    budget = [limits.max_nodes]
    docs: list[Document] = []
    try:
        while composer.has_document():
            docs.append(_decode_document(composer.document(), len(docs), limits, budget))
        return docs
    finally:
        composer.close()


def load_yaml(text: str | bytes, limits: Limits = DEFAULT_LIMITS) -> object:
    """The first document's JSON value (what mig-parted, or kubectl, decodes); raises MigError."""
    return read_first(text, limits).value
