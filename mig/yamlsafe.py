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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple, Protocol

import yaml

from migops.mig.gcpause import paused_gc
from migops.mig.problems import MigError, Problem, index_path, key_part, key_path, parent_path

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class InputLimits:
    """Bounds for one input. 1 MiB is the most a ConfigMap can hold anyway."""

    max_bytes: int = 1 << 20
    max_depth: int = 32
    max_nodes: int = 100_000  # nodes decoded, aliases counted each time they are used (whole input)


DEFAULT_LIMITS = InputLimits()


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
    locations: Mapping[str, Location]  # problem path -> where its key (or item) is written (a LocationIndex)
    surprises: Mapping[str, Scalar]  # path -> scalars whose reading is not what they look like
    start: Location  # where the document's content begins
    index: int = 0  # position in the stream
    rest: Location | None = None  # read_first: where a further, non-empty document starts (mig-parted ignores it)
    # path -> (line, column, style) of block scalars (| and >), to map a ConfigMap's config.yaml lines
    # back to the file
    strings: Mapping[str, tuple[int, int, str]] = field(default_factory=dict)

    def locate(self, path: str) -> Location | None:
        """Where the path (or its nearest ancestor present in the index) is written."""
        return locate(self.locations, path)


def locate(locations: Mapping[str, Location], path: str) -> Location | None:
    """Where the path (or its nearest ancestor present in `locations`) is written: the one lookup every
    caller placing problems uses (a large file's verdict places thousands of them)."""
    p: str | None = path
    get = locations.get
    while p is not None:
        loc = get(p)
        if loc is not None:
            return loc
        p = parent_path(p)
    return None


class _Pos(NamedTuple):
    """A 0-based position, as a libyaml mark has it (the reader keeps the parser's marks themselves)."""

    line: int
    column: int


class _Mark(Protocol):
    """What the reader uses of a position: a libyaml mark (C or pure-Python parser) or a _Pos."""

    @property
    def line(self) -> int: ...  # 0-based

    @property
    def column(self) -> int: ...  # 0-based


def _fail(rule: str, message: str, path: str = "", pos: _Mark | None = None) -> MigError:
    """An error at `pos`: a libyaml mark or a _Pos (0-based line and column)."""
    if pos is None:
        return MigError([Problem(path, rule, message, "error")])
    return MigError([Problem(path, rule, message, "error", pos.line + 1, pos.column + 1)])


# ---------------------------------------------------------------------------------------------------
# go-yaml v2's scalar resolution (resolve.go)

_T = "tag:yaml.org,2002:"
STR, BOOL, INT, FLOAT, NULL, TIMESTAMP, BINARY, MERGE = (
    _T + s for s in ("str", "bool", "int", "float", "null", "timestamp", "binary", "merge")
)
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
    (("<<",), (MERGE, "<<")),
):
    for _w in _words:
        _MAP[_w] = _item
_HINT = {c: "S" for c in "+-"} | {c: "D" for c in "0123456789"} | {c: "M" for c in "yYnNtTfFoO~"} | {".": "."}

_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?\Z")
_DOT_FLOAT = re.compile(r"\.[0-9]+([eE][-+]?[0-9]+)?\Z")
_DECIMAL = re.compile(r"[1-9][0-9]{0,18}\Z|0\Z")  # fast path: plainly an int (int64, or uint64 as go-yaml reads one)
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
    days = (
        31,
        29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28,
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    )[month - 1]
    if not 1 <= day <= days:
        return False
    rest = s[m.end() :]
    if not rest:
        return True
    if rest[0] not in "Tt ":
        return False
    t = _TS_TIME.match(rest, 1)
    if not t or int(t.group(1)) > 23 or int(t.group(2)) > 59 or int(t.group(3)) > 59:
        return False
    zone = rest[t.end() :]
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
    return "!!" + tag[len(_T) :] if tag.startswith(_T) else tag


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
    return "".join("\ufffd" if "\udc80" <= c <= "\udcff" else c for c in data.decode("utf-8", "surrogateescape"))


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
# Reading: libyaml's events (the parser that go-yaml v2 ports), decoded as go-yaml's decode.go decodes a
# document into interface{}, and converted as sigs.k8s.io/yaml converts that value to JSON.
#
# go-yaml composes a whole document into nodes, then decodes the nodes. Here each event is decoded as it
# comes, without a node tree (a 1 MiB file is some 100,000 events, and a tree would cost about as much
# again as decoding them); only what an alias can refer to is kept: the events of anchored nodes, on a tape. Errors
# come in go-yaml's order: an error of composing (a syntax error, nesting deeper than the bound, an
# unknown anchor) anywhere in the document wins over an error of decoding, so after a decoding error the
# rest of the document is still read through before the decoding error is raised.
#
# An event is a tuple, made once per libyaml event (a recorded anchor keeps these):
#   scalar: (_EV_SCALAR, pos, text, tag, plain, style)  pos: libyaml's start mark (0-based .line, .column);
#                                                       plain: go-yaml's `implicit` (no tag, or `!`, unquoted)
#   start of a sequence or a mapping: (_EV_SEQ or _EV_MAP, pos, tag)
#   end of either: _EV_END
#   alias: (_EV_ALIAS, pos, name, anchor)               anchor: the _Anchor it names, found when it is read

_EV_SCALAR, _EV_SEQ, _EV_MAP, _EV_ALIAS = 0, 1, 2, 3
_EV_END = (4,)
# The items after the kind depend on the kind, and mypy cannot narrow a tuple by its first item: they are
# Any, and the code names their types where it takes them out (`text: str = ev[2]`).
_Event = tuple[Any, ...]
_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_BLOCK = ("|", ">")


class _Anchor:
    """Where an anchored node's events are on the tape: [start, end). `end` is None until the node ends:
    an alias inside its own anchor replays the events so far, which is enough to find that it contains
    itself."""

    __slots__ = ("start", "end")

    def __init__(self, start: int) -> None:
        self.start = start
        self.end: int | None = None


class LocationIndex(Mapping[str, Location]):
    """Problem path -> where its key (or item) is written. The reader keeps the parser's marks (0-based
    line and column) and makes a Location only when one is looked up: a large file has some 100,000 paths,
    and a verdict shows at most a few hundred problems. `shifted` and `pinned` make views for a config
    inside a ConfigMap (lines of the whole file, or one place for all)."""

    __slots__ = ("_raw", "_lines", "_columns", "_pin")

    def __init__(self, raw: Mapping[str, _Mark], lines: int = 1, columns: int = 1, pin: Location | None = None) -> None:
        self._raw = raw
        self._lines = lines  # added to the 0-based line
        self._columns = columns
        self._pin = pin

    def __getitem__(self, path: str) -> Location:
        pos = self._raw[path]
        return self._pin or Location(pos.line + self._lines, pos.column + self._columns)

    def get(self, path: str, default: Location | None = None) -> Location | None:  # type: ignore[override]
        pos = self._raw.get(path)
        if pos is None:
            return default
        return self._pin or Location(pos.line + self._lines, pos.column + self._columns)

    def __contains__(self, path: object) -> bool:
        return path in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def shifted(self, lines: int, columns: int) -> LocationIndex:
        """Every location moved down `lines` and right `columns`."""
        return LocationIndex(self._raw, self._lines + lines, self._columns + columns, self._pin)

    def pinned(self, location: Location) -> LocationIndex:
        """The same paths, all at `location`."""
        return LocationIndex(self._raw, pin=location)


def _syntax(exc: yaml.YAMLError, text: str) -> MigError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    pos = mark
    if mark is not None and mark.index >= len(text.rstrip()):
        # at the end of the stream: point at the end of the last line that has text, not past it
        body = text.rstrip()
        pos = _Pos(body.count("\n"), len(body.rsplit("\n", 1)[-1]))
    return _fail("yaml-syntax", f"not valid YAML: {' '.join(str(exc).split())}", pos=pos)


class _Composer:
    """libyaml's event stream, one document at a time, as event tuples (go-yaml's parser.go)."""

    def __init__(self, text: str, limits: InputLimits) -> None:
        self.text = text
        self.loader = _Loader(text)
        self.limits = limits
        self.started = False
        self.failed = False  # the document's events ended in an error of composing
        self.draining = False  # read on only for errors of composing: nothing more is recorded
        self._recording: list[tuple[_Anchor, int]] = []

    def close(self) -> None:
        self.loader.dispose()

    def _event(self) -> yaml.Event:
        try:
            event: yaml.Event = self.loader.get_event()  # not None: nothing reads past the stream's end
            return event
        except yaml.YAMLError as exc:
            raise _syntax(exc, self.text) from None

    def _peek(self) -> yaml.Event:
        try:
            event: yaml.Event = self.loader.peek_event()  # not None: nothing peeks past the stream's end
            return event
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
            assert start is not None  # libyaml marks every event
            while True:
                event = self._event()
                if isinstance(event, yaml.StreamEndEvent):
                    return None
                if isinstance(event, (yaml.DocumentStartEvent, yaml.DocumentEndEvent)):
                    continue
                if (
                    isinstance(event, yaml.ScalarEvent)
                    and event.value == ""
                    and event.implicit[0]
                    and not event.tag
                    and event.anchor is None
                ):
                    continue
                return Location(start.line + 1, start.column + 1)
        except MigError as exc:
            if start is not None:
                return Location(start.line + 1, start.column + 1)
            p = exc.problems[0]
            return Location(p.line or 1, p.column or 1)

    def document(self) -> tuple[Iterator[_Event], list[_Event]]:
        """The next document's events (an empty document is a null scalar) and the tape its anchors'
        events go to."""
        start = self._event()
        version = getattr(start, "version", None)
        if version is not None and tuple(version) != (1, 1):
            raise _fail(
                "yaml-syntax",
                f"not valid YAML: found incompatible YAML document (%YAML "
                f"{version[0]}.{version[1]}; mig-parted reads only YAML 1.1)",
                pos=start.start_mark,
            )
        tape: list[_Event] = []
        self.failed = self.draining = False
        self._recording = []
        return self._events(tape, self._recording), tape

    def drain(self, events: Iterator[_Event]) -> None:
        """Read the rest of a document whose decoding failed: raises its first error of composing, if any."""
        self.draining = True
        self._recording.clear()
        for _ in events:
            pass

    def _anchored(self, anchors: dict[str, _Anchor], name: str, first: _Event, tape: list[_Event]) -> _Anchor:
        """The anchor of a node named `name` (a later anchor of the same name replaces it, as in go-yaml),
        whose events go to the tape from its `first` on."""
        anchor = anchors[name] = _Anchor(len(tape))
        if not self.draining:
            tape.append(first)
        return anchor

    def _events(self, tape: list[_Event], recording: list[tuple[_Anchor, int]]) -> Iterator[_Event]:
        """The document's events as tuples; those of anchored nodes also go to the tape (`recording`:
        the anchored nodes not yet ended, with their depth)."""
        get = self.loader.get_event
        max_depth = self.limits.max_depth
        anchors: dict[str, _Anchor] = {}
        depth = 0  # containers open
        scalar_event, alias_event = yaml.ScalarEvent, yaml.AliasEvent
        map_start, seq_start = yaml.MappingStartEvent, yaml.SequenceStartEvent
        map_end, seq_end = yaml.MappingEndEvent, yaml.SequenceEndEvent
        try:
            while True:
                event = get()
                etype = type(event)
                if etype is scalar_event:
                    mark = event.start_mark
                    if depth >= max_depth:
                        raise _fail("yaml-too-deep", f"document is nested deeper than {max_depth} levels", pos=mark)
                    out: _Event = (_EV_SCALAR, mark, event.value, event.tag or "", event.implicit[0], event.style or "")
                    if event.anchor is not None:
                        anchor = self._anchored(anchors, event.anchor, out, tape)
                        anchor.end = len(tape)  # a scalar anchors one event: its own
                    elif recording:
                        tape.append(out)
                elif etype is map_start or etype is seq_start:
                    mark = event.start_mark
                    if depth >= max_depth:
                        raise _fail("yaml-too-deep", f"document is nested deeper than {max_depth} levels", pos=mark)
                    out = (_EV_MAP if etype is map_start else _EV_SEQ, mark, event.tag or "")
                    if event.anchor is not None:
                        anchor = self._anchored(anchors, event.anchor, out, tape)
                        if not self.draining:
                            recording.append((anchor, depth))
                    elif recording:
                        tape.append(out)
                    depth += 1
                elif etype is map_end or etype is seq_end:
                    depth -= 1
                    out = _EV_END
                    if recording:
                        tape.append(out)
                        while recording and recording[-1][1] == depth:
                            recording.pop()[0].end = len(tape)
                elif etype is alias_event:
                    out = _alias(event, anchors)
                    if recording:
                        tape.append(out)
                elif etype is yaml.DocumentEndEvent:
                    return
                else:  # pragma: no cover - libyaml produces no other event inside a document
                    raise _fail("yaml-syntax", f"not valid YAML: unexpected {etype.__name__}", pos=event.start_mark)
                yield out
        except yaml.YAMLError as exc:
            self.failed = True
            raise _syntax(exc, self.text) from None
        except MigError:
            self.failed = True
            raise


def _alias(event: yaml.AliasEvent, anchors: dict[str, _Anchor]) -> _Event:
    """An alias as an event, with the anchor it names (which must come before it)."""
    name = event.anchor
    assert name is not None  # libyaml's alias events name their anchor
    target = anchors.get(name)
    if target is None:
        raise _fail("yaml-syntax", f"not valid YAML: unknown anchor '{name}' referenced", pos=event.start_mark)
    return (_EV_ALIAS, event.start_mark, name, target)


def _repeated_key(first: _Event, source: _Event, kev: _Event, path: str) -> MigError:
    """A key written twice in one mapping: `first` and `source` are the scalars the two keys came from,
    `kev` the second key's own event (an alias, or that scalar)."""
    same = "" if first[2] == source[2] else f" ({first[2]!r} and {source[2]!r} are the same key in YAML 1.1)"
    return _fail(
        "duplicate-key",
        f"key {source[2]!r} appears twice in one mapping (lines {first[1].line + 1} and {kev[1].line + 1}){same}; "
        "mig-parted would silently keep the last one",
        path,
        kev[1],
    )


def _colliding_key(source: _Event, jkey: str, kev: _Event, path: str) -> MigError:
    """A key (`source`: the scalar it came from; `kev`: its own event) whose JSON key `jkey` another key
    of its mapping becomes as well."""
    return _fail(
        "duplicate-key",
        f"key {source[2]!r} and another key of this mapping both become {jkey!r} as mig-parted reads them "
        "(YAML 1.1 types, then JSON keys); which of the two it keeps changes from run to run",
        path,
        kev[1],
    )


def _allowed_alias_ratio(count: int) -> float:
    if count <= 400_000:
        return 0.99
    if count >= 4_000_000:
        return 0.10
    return 0.99 - 0.89 * (count - 400_000) / 3_600_000


Next = Callable[[], _Event]  # the next event of the node being decoded (from the parser, or replayed)


class _Decoder:
    """go-yaml's decoder for one document, with migops's bounds, and the JSON conversion of keys.

    Every node costs one from the input's node budget (`left`, shared by the documents of a stream) and
    counts towards go-yaml's alias ratio; a node's path is made once, for its location and for any
    problem or surprise found on it."""

    def __init__(self, limits: InputLimits, left: int, tape: list[_Event]) -> None:
        self.max_depth = limits.max_depth
        self.max_nodes = limits.max_nodes
        self.left = left  # nodes the input may still decode
        self.base = left + 1  # go-yaml counts the document node too: count = base - left
        self.alias_count = 0
        self.alias_depth = 0
        self.slow = False  # within an alias, or past 100 aliased nodes: every node takes the full check
        self.active: set[int] = set()  # aliases being expanded (go-yaml refuses one met inside itself)
        self.tape = tape
        self.locations: dict[str, _Mark] = {}
        self.surprises: dict[str, Scalar] = {}
        self.strings: dict[str, tuple[int, int, str]] = {}
        self.non_finite: list[str] = []
        self.parts: dict[str, str] = {}  # JSON key -> how a path spells it

    def _tick(self, pos: _Mark) -> None:
        self.left -= 1
        count = self.base - self.left
        if self.alias_depth:
            self.alias_count += 1
        if self.alias_count > 100 and count > 1000 and self.alias_count / count > _allowed_alias_ratio(count):
            raise _fail(
                "yaml-syntax", "not valid YAML: document contains excessive aliasing (go-yaml refuses it)", pos=pos
            )
        if self.left < 0:
            raise _fail(
                "yaml-too-large",
                f"document expands to more than {self.max_nodes} nodes (aliases count each time they are used)",
                pos=pos,
            )

    def _enter(self, alias: _Event, path: str) -> None:
        """Start expanding an alias (go-yaml refuses an alias met again while its own value is decoded)."""
        if id(alias) in self.active:
            raise _fail("yaml-syntax", f"not valid YAML: anchor '{alias[2]}' value contains itself", path, alias[1])
        self.active.add(id(alias))
        self.alias_depth += 1
        self.slow = True

    def _leave(self, alias: _Event) -> None:
        self.alias_depth -= 1
        self.active.discard(id(alias))
        self.slow = self.alias_depth > 0 or self.alias_count > 100

    def _replay(self, anchor: _Anchor) -> Next:
        end = len(self.tape) if anchor.end is None else anchor.end
        return iter(self.tape[anchor.start : end]).__next__

    def scalar(self, ev: _Event, path: str) -> tuple[str, object]:
        """(resolved tag, value) of a scalar, as go-yaml decodes it into interface{}."""
        text: str = ev[2]
        tag: str = ev[3]
        if not tag:
            if not ev[4]:
                return STR, text  # quoted, no tag
            if text in _NULLS:
                return NULL, None
            if _DECIMAL.match(text):
                return INT, int(text)  # the common case, without the general resolver
        try:
            rtag, value = resolve(tag, text)
        except ValueError as exc:
            raise _fail("yaml-syntax", f"not valid YAML: {exc}", path, ev[1]) from None
        if rtag == BINARY:
            compact = text.replace("\n", "").replace("\r", "")
            try:
                value = _go_string(base64.b64decode(compact, validate=True))
            except ValueError:
                raise _fail(
                    "yaml-syntax", "not valid YAML: !!binary value contains invalid base64 data", path, ev[1]
                ) from None
        return rtag, value

    def scalar_value(self, ev: _Event, path: str) -> object:
        """A scalar's JSON value; how it was written is noted where it reads otherwise."""
        text: str = ev[2]
        if not ev[3]:  # no tag: the common cases first
            if not ev[4]:  # quoted (or a block): a string
                if ev[5] in _BLOCK:
                    self.strings[path] = (ev[1].line + 1, ev[1].column + 1, ev[5])
                return text
            if text and text[0] not in _HINT:
                return text  # plain, and no YAML 1.1 type starts with this character
        rtag, value = self.scalar(ev, path)
        style = ev[5]
        if rtag == STR:
            if style in _BLOCK:
                self.strings[path] = (ev[1].line + 1, ev[1].column + 1, style)
            return value
        if rtag == INT:
            if str(value) != text:  # not as it reads: a prefix, a sign, a leading zero, _
                self.surprises[path] = Scalar(text, "int", style)
            return value
        if rtag == NULL:
            self.surprises[path] = Scalar(text, "null", style)
            return None
        if rtag == BOOL:
            if text not in ("true", "false"):
                self.surprises[path] = Scalar(text, "bool", style)
            return value
        if rtag == FLOAT:
            self.surprises[path] = Scalar(text, "float", style)
            if math.isnan(value) or math.isinf(value):  # type: ignore[arg-type]
                self.non_finite.append(path)
            return value
        # timestamps, custom tags, merge written as a value, !!binary: strings
        tag = ev[3]
        if tag and tag not in _RESOLVABLE and tag not in ("!", BINARY):
            self.surprises[path] = Scalar(text, "tagged", style)
        if style in _BLOCK:
            self.strings[path] = (ev[1].line + 1, ev[1].column + 1, style)
        return value if isinstance(value, str) else text

    def node(self, ev: _Event, nxt: Next, path: str, depth: int) -> object:
        """The value of the node whose first event is `ev`; `nxt` gives the events after it."""
        if self.slow or self.left <= 0:
            self._tick(ev[1])
        else:
            self.left -= 1
        if depth > self.max_depth:
            raise _fail(
                "yaml-too-deep",
                f"document is nested deeper than {self.max_depth} levels (counting what aliases expand to)",
                path,
                ev[1],
            )
        kind = ev[0]
        if kind == _EV_SCALAR:
            return self.scalar_value(ev, path)
        if kind == _EV_SEQ:
            return self.sequence(nxt, path, depth)
        if kind == _EV_MAP:
            out: dict[str, object] = {}
            self.mapping(nxt, path, depth, out, {}, False)
            return out
        self._enter(ev, path)  # an alias: its anchor's value, decoded again here
        try:
            replay = self._replay(ev[3])
            return self.node(replay(), replay, path, depth)
        finally:
            self._leave(ev)

    def sequence(self, nxt: Next, path: str, depth: int) -> list[object]:
        out: list[object] = []
        append = out.append
        locations = self.locations
        depth += 1
        shallow = depth <= self.max_depth
        i = 0
        while True:
            ev = nxt()
            if ev is _EV_END:
                return out
            item_path = f"{path}[{i}]"
            i += 1
            locations[item_path] = ev[1]
            if ev[0] == _EV_SCALAR and shallow and not self.slow and self.left > 0:
                self.left -= 1  # what node() would do for a scalar, without the call
                if not ev[3]:
                    text = ev[2]
                    if not ev[4]:
                        append(text if ev[5] not in _BLOCK else self.scalar_value(ev, item_path))
                        continue
                    if _DECIMAL.match(text):
                        append(int(text))
                        continue
                    if text and text[0] not in _HINT:
                        append(text)
                        continue
                append(self.scalar_value(ev, item_path))
                continue
            append(self.node(ev, nxt, item_path, depth))

    def _key(self, kev: _Event, path: str) -> tuple[object, str, _Event]:
        """A mapping key decoded into interface{}: (Go key, JSON key, the scalar it came from). The Go
        key is the string itself, or (type letter, value) for a bool, int or float."""
        if self.slow or self.left <= 0:
            self._tick(kev[1])
        else:
            self.left -= 1
        source = kev
        if kev[0] == _EV_ALIAS:
            if id(kev) in self.active:
                raise _fail("yaml-syntax", f"not valid YAML: anchor '{kev[2]}' value contains itself", path, kev[1])
            source = self.tape[kev[3].start]
            self.alias_depth += 1
            self._tick(source[1])
            self.alias_depth -= 1
            self.slow = self.alias_depth > 0 or self.alias_count > 100
        if source[0] != _EV_SCALAR:
            raise _fail(
                "yaml-syntax", "not valid YAML: invalid map key: a mapping or sequence cannot be a key", path, kev[1]
            )
        text: str = source[2]
        if not source[3] and (not source[4] or text and text[0] not in _HINT):
            return text, text, source  # a string: quoted, or plain and no YAML 1.1 type starts this way
        rtag, value = self.scalar(source, path)
        if rtag == NULL:
            raise _fail(
                "yaml-syntax",
                "not valid YAML for mig-parted: a mapping key is null (empty or ~), "
                "which sigs.k8s.io/yaml cannot turn into a JSON key",
                path,
                kev[1],
            )
        vtype = type(value)
        if vtype is bool:
            return ("b", value), "true" if value else "false", source
        if vtype is int:
            if value >= _INT64:  # type: ignore[operator]
                raise _fail(
                    "yaml-syntax",
                    f"not valid YAML for mig-parted: the key {text!r} is an integer beyond "
                    "int64 (go-yaml's uint64), which sigs.k8s.io/yaml cannot turn into a JSON key",
                    path,
                    kev[1],
                )
            return ("i", value), str(value), source
        if vtype is float:
            return ("f", value), float32_text(value), source  # type: ignore[arg-type]
        key = value if isinstance(value, str) else text
        return key, key, source

    def mapping(
        self,
        nxt: Next,
        path: str,
        depth: int,
        out: dict[str, object],
        owners: dict[str, tuple[object, bool]],
        merged: bool,
    ) -> None:
        """Decode a mapping's pairs into `out` in document order; `owners` maps each JSON key of `out` to
        (Go key, set by the outer mapping itself) so collisions and merge overrides can be told."""
        seen: dict[object, _Event] = {}
        locations = self.locations
        parts = self.parts
        depth += 1
        shallow = depth <= self.max_depth
        while True:
            kev = nxt()
            if kev is _EV_END:
                return
            if kev[0] == _EV_SCALAR and kev[2] == "<<" and (kev[4] or kev[3] == MERGE):
                self.merge(nxt(), nxt, path, depth - 1, out, owners)
                continue
            if (
                kev[0] == _EV_SCALAR
                and not kev[3]
                and not self.slow
                and self.left > 0
                and (not kev[4] or kev[2] and kev[2][0] not in _HINT)
            ):
                self.left -= 1  # a string key: what _key() would do, without the call
                gokey = jkey = kev[2]
                source = kev
            else:
                gokey, jkey, source = self._key(kev, path)
            part = parts.get(jkey)
            if part is None:
                part = parts[jkey] = key_part(jkey)
            child = f"{path}.{part}" if path else part
            first = seen.get(gokey)
            if first is not None:
                raise _repeated_key(first, source, kev, child)
            seen[gokey] = source
            owner = owners.get(jkey)
            if owner is not None and owner[0] != gokey:
                raise _colliding_key(source, jkey, kev, child)
            if type(gokey) is tuple and source[2] != jkey:
                self.surprises[child] = Scalar(source[2], "key", source[5])
            if merged and owner is not None and owner[1]:
                self.surprises[child] = Scalar(source[2], "merge-override", source[5])
            locations[child] = kev[1]
            vev = nxt()
            if vev[0] == _EV_SCALAR and shallow and not self.slow and self.left > 0:
                self.left -= 1  # what node() would do for a scalar, without its checks
                out[jkey] = self._plain_value(vev, child)
            else:
                out[jkey] = self.node(vev, nxt, child, depth)
            owners[jkey] = (gokey, not merged)

    def _plain_value(self, vev: _Event, path: str) -> object:
        """A scalar value the short way where its text says what it is (a string, a decimal int, a
        bool), else as scalar_value decodes it."""
        text = vev[2]
        if vev[3]:
            return self.scalar_value(vev, path)
        if not vev[4]:
            return text if vev[5] not in _BLOCK else self.scalar_value(vev, path)
        if text and text[0] not in _HINT:
            return text
        if _DECIMAL.match(text):
            return int(text)
        if text == "true" or text == "false":
            return text == "true"
        return self.scalar_value(vev, path)

    def merge(
        self,
        vev: _Event,
        nxt: Next,
        path: str,
        depth: int,
        out: dict[str, object],
        owners: dict[str, tuple[object, bool]],
    ) -> None:
        """go-yaml's merge: a mapping, an alias of one, or a sequence of them (the earlier ones win)."""

        def want_map() -> MigError:
            return _fail(
                "yaml-syntax", "not valid YAML: map merge requires map or sequence of maps as the value", path, vev[1]
            )

        kind = vev[0]
        if kind == _EV_MAP:
            self._tick(vev[1])
            self.mapping(nxt, path, depth, out, owners, True)
        elif kind == _EV_ALIAS:
            if self.tape[vev[3].start][0] != _EV_MAP:
                raise want_map()
            self._merge_alias(vev, path, depth, out, owners)
        elif kind == _EV_SEQ:
            items: list[tuple[_Event, list[_Event] | None]] = []
            while True:  # every item is checked before any is merged
                item = nxt()
                if item is _EV_END:
                    break
                if item[0] == _EV_ALIAS and self.tape[item[3].start][0] == _EV_MAP:
                    items.append((item, None))
                elif item[0] == _EV_MAP:
                    items.append((item, _rest_of_node(nxt)))
                else:
                    raise want_map()
            for item, events in reversed(items):
                if events is None:
                    self._merge_alias(item, path, depth, out, owners)
                else:
                    self._tick(item[1])
                    self.mapping(iter(events).__next__, path, depth, out, owners, True)
        else:
            raise want_map()

    def _merge_alias(
        self, alias: _Event, path: str, depth: int, out: dict[str, object], owners: dict[str, tuple[object, bool]]
    ) -> None:
        self._tick(alias[1])
        self._enter(alias, path)
        try:
            replay = self._replay(alias[3])
            self._tick(replay()[1])  # the mapping's start
            self.mapping(replay, path, depth, out, owners, True)
        finally:
            self._leave(alias)


def _rest_of_node(nxt: Next) -> list[_Event]:
    """The events after a container's start, through its end."""
    events: list[_Event] = []
    level = 0
    while True:
        ev = nxt()
        events.append(ev)
        if ev is _EV_END:
            if level == 0:
                return events
            level -= 1
        elif ev[0] == _EV_SEQ or ev[0] == _EV_MAP:
            level += 1


def _check_text(text: str | bytes, limits: InputLimits) -> str:
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


def _decode_document(composer: _Composer, index: int, limits: InputLimits, left: int) -> tuple[Document, int]:
    """The next document of the stream, and the node budget left after it."""
    events, tape = composer.document()
    nxt = events.__next__
    decoder = _Decoder(limits, left, tape)
    try:
        root = nxt()
        decoder.locations[""] = root[1]
        value = decoder.node(root, nxt, "", 1)
        for _ in events:  # the document's end
            pass
    except MigError:
        if not composer.failed:
            composer.drain(events)  # a decoding error: an error of composing later in the document wins
        raise
    except StopIteration:  # pragma: no cover - every replayed node is whole or meets itself first
        raise _fail("yaml-syntax", "not valid YAML: an alias refers to a node that is not complete") from None
    locations = LocationIndex(decoder.locations)
    if decoder.non_finite:
        bad = _non_finite_path(value, "")
        if bad is not None:  # (a later duplicate or merge may have replaced every one of them)
            loc = Document(value, locations, {}, Location(1, 1)).locate(bad)
            raise MigError(
                [
                    Problem(
                        bad,
                        "yaml-syntax",
                        "not valid YAML for mig-parted: a float that is NaN or "
                        "infinite (.nan, .inf), which JSON cannot hold (json: unsupported value)",
                        "error",
                        loc.line if loc else None,
                        loc.column if loc else None,
                    )
                ]
            )
    start = Location(root[1].line + 1, root[1].column + 1)
    return Document(value, locations, decoder.surprises, start, index, strings=decoder.strings), decoder.left


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


_EMPTY = Document(None, LocationIndex({"": _Pos(0, 0)}), {}, Location(1, 1))


@paused_gc()
def read_first(text: str | bytes, limits: InputLimits = DEFAULT_LIMITS) -> Document:
    """The first document, exactly as mig-parted reads a config file; `rest` tells where the file goes
    on past it (mig-parted ignores the rest). An empty input reads as null."""
    text = _check_text(text, limits)
    composer = _Composer(text, limits)
    try:
        if not composer.has_document():
            return _EMPTY
        doc, _ = _decode_document(composer, 0, limits, limits.max_nodes)
        rest = composer.rest()
        if rest is not None:
            doc = Document(doc.value, doc.locations, doc.surprises, doc.start, 0, rest, doc.strings)
        return doc
    finally:
        composer.close()


@paused_gc()
def read_stream(text: str | bytes, limits: InputLimits = DEFAULT_LIMITS) -> list[Document]:
    """Every document of a stream, each read as sigs.k8s.io/yaml reads one (kubectl's reading of a
    manifest file). The node budget covers the whole input."""
    text = _check_text(text, limits)
    composer = _Composer(text, limits)
    left = limits.max_nodes
    docs: list[Document] = []
    try:
        while composer.has_document():
            doc, left = _decode_document(composer, len(docs), limits, left)
            docs.append(doc)
        return docs
    finally:
        composer.close()


def load_yaml(text: str | bytes, limits: InputLimits = DEFAULT_LIMITS) -> object:
    """The first document's JSON value (what mig-parted, or kubectl, decodes); raises MigError."""
    return read_first(text, limits).value
