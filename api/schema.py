"""API values declared once, as frozen dataclasses whose fields carry their JSON rules (`prop`).

From that one declaration come the three things an API type needs, so none can disagree with another:
- `openapi`: the OpenAPI v3 schema a CustomResourceDefinition serves (structural, as the API server
  requires: every property typed, no references);
- `parse`: an object as the API server (or a person) writes it, read into the value; a value that
  breaks its field's rule is a ValueError whose message starts with the field's path (`spec.interval:`);
- `dump`: the value as JSON, each field that differs from its default under its JSON name.

Field types: str, bool, int, float (a duration when `prop(duration=...)`: Go's 60s, 5m, 1h30m, 500ms,
read into seconds), a StrEnum (its values), tuple[X, ...], another such dataclass, `X | None`, and
Mapping[str, Any] (an object kept as written).
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass
from decimal import Decimal
from typing import Any

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds of a Go-style duration as Flux writes them: 60s, 5m, 1h30m, 500ms."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration such as 60s, 5m or 1h")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """Seconds as a duration the pattern admits and parse_duration reads back exactly (no exponent)."""
    text = format(Decimal(repr(float(seconds))), "f")
    return (text.removesuffix(".0") if "." in text else text) + "s"


@dataclass(frozen=True)
class Prop:
    """A field's JSON rules (dataclass field metadata, written with `prop`)."""

    description: str = ""
    json: str = ""  # the JSON name; empty: the field's name in camelCase
    duration: str = ""  # a duration field's default as written (the value holds seconds)
    served_default: bool = False  # the CRD declares the default, so the API server fills it in
    required: bool | None = None  # None: required exactly when the field has no default
    min_length: int | None = None
    fmt: str = ""  # OpenAPI format: int64, date-time
    map_keys: tuple[str, ...] = ()  # a list of objects, one per value of these keys
    open_object: bool = False  # a Mapping kept as written (x-kubernetes-preserve-unknown-fields)
    always: bool = False  # written even when it holds its default


def prop(
    description: str = "",
    *,
    default: Any = MISSING,
    factory: Any = MISSING,
    duration: str = "",
    json: str = "",
    served_default: bool = False,
    required: bool | None = None,
    min_length: int | None = None,
    fmt: str = "",
    map_keys: tuple[str, ...] = (),
    open_object: bool = False,
    always: bool = False,
) -> Any:
    """A dataclass field with its JSON rules. `duration="60s"`: a duration whose default is 60 seconds,
    served by the CRD as written."""
    rules = Prop(
        description,
        json,
        duration,
        served_default or bool(duration),
        required,
        min_length,
        fmt,
        map_keys,
        open_object,
        always,
    )
    if duration:
        default = parse_duration(duration)
    metadata = {"prop": rules}
    if factory is not MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class _Field:
    name: str  # the Python attribute
    key: str  # the JSON name
    hint: Any
    rules: Prop
    default: Any  # MISSING when required

    @property
    def required(self) -> bool:
        return self.rules.required if self.rules.required is not None else self.default is MISSING


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def _fields(cls: type) -> list[_Field]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        rules = f.metadata.get("prop") or Prop()
        default = f.default if f.default is not MISSING else MISSING
        if f.default_factory is not MISSING:
            default = f.default_factory()
        out.append(_Field(f.name, rules.json or _camel(f.name), hints[f.name], rules, default))
    return out


def _optional(hint: Any) -> Any:
    """X of `X | None`; the hint itself otherwise."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _is_enum(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, enum.Enum)


def _is_mapping(hint: Any) -> bool:
    return typing.get_origin(hint) in (Mapping, dict) or hint in (Mapping, dict)


# ------------------------------------------------------------------------------------------ schema
def openapi(cls: type) -> dict[str, Any]:
    """The OpenAPI v3 schema of a dataclass: an object with one property per field."""
    fields = _fields(cls)
    out: dict[str, Any] = {"type": "object"}
    required = [f.key for f in fields if f.required]
    if required:
        out["required"] = required
    out["properties"] = {f.key: _property(f) for f in fields}
    return out


def _property(f: _Field) -> dict[str, Any]:
    rules = f.rules
    out = _schema_of(_optional(f.hint), rules)
    if rules.min_length is not None:
        out["minLength"] = rules.min_length
    if rules.served_default:
        out["default"] = rules.duration or _json(f.default, f.hint, rules)
    if rules.description:
        out["description"] = rules.description
    return out


def _schema_of(hint: Any, rules: Prop) -> dict[str, Any]:
    if rules.duration:
        return {"type": "string", "pattern": DURATION_PATTERN}
    if _is_enum(hint):
        return {"type": "string", "enum": [m.value for m in hint]}
    if dataclasses.is_dataclass(hint):
        return openapi(hint)  # type: ignore[arg-type]
    if typing.get_origin(hint) is tuple:
        listed: dict[str, Any] = {"type": "array"}
        if rules.map_keys:
            listed |= {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(rules.map_keys)}
        return listed | {"items": _schema_of(typing.get_args(hint)[0], Prop())}
    if _is_mapping(hint):
        return (
            {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            if rules.open_object
            else {"type": "object"}
        )
    scalar = {str: "string", bool: "boolean", int: "integer", float: "number"}[hint]
    return {"type": scalar, "format": rules.fmt} if rules.fmt else {"type": scalar}


# ------------------------------------------------------------------------------------------ reading
def parse(cls: type[Any], data: object, path: str) -> Any:
    """`data` read into `cls`; ValueError `<path>.<field>: <rule>` when it breaks one."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: must be an object, not {type(data).__name__}")
    values = {}
    for f in _fields(cls):
        given = data.get(f.key)
        if given is None:
            if f.default is MISSING:
                raise ValueError(f"{path}.{f.key}: is required")
            continue
        values[f.name] = _read(_optional(f.hint), f.rules, given, f"{path}.{f.key}")
    try:
        return cls(**values)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _read(hint: Any, rules: Prop, given: object, path: str) -> Any:
    if rules.duration:
        if not isinstance(given, str):
            raise ValueError(f"{path}: must be a duration such as 60s, 5m or 1h")
        try:
            return parse_duration(given)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    if _is_enum(hint):
        if given not in {m.value for m in hint}:
            raise ValueError(f"{path}: must be one of {', '.join(m.value for m in hint)}, not {given!r}")
        return hint(given)
    if dataclasses.is_dataclass(hint):
        return parse(hint, given, path)  # type: ignore[arg-type]
    if typing.get_origin(hint) is tuple:
        if not isinstance(given, list):
            raise ValueError(f"{path}: must be a list")
        item = typing.get_args(hint)[0]
        return tuple(_read(item, Prop(), v, f"{path}[{i}]") for i, v in enumerate(given))
    if _is_mapping(hint):
        if not isinstance(given, Mapping):
            raise ValueError(f"{path}: must be an object")
        return given
    return _scalar(hint, rules, given, path)


def _scalar(hint: Any, rules: Prop, given: object, path: str) -> Any:
    if hint is float and isinstance(given, int) and not isinstance(given, bool):
        given = float(given)
    if not isinstance(given, hint) or (hint is int and isinstance(given, bool)):
        kind = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}[hint]
        raise ValueError(f"{path}: must be {kind}, not {given!r}")
    if rules.min_length is not None and isinstance(given, str) and len(given) < rules.min_length:
        raise ValueError(f"{path}: is required" if rules.min_length == 1 else f"{path}: too short")
    return given


# ------------------------------------------------------------------------------------------ writing
def dump(value: Any) -> dict[str, Any]:
    """A dataclass value as JSON: every field that differs from its default, and those without a
    default or marked `always`; None is never written."""
    out = {}
    for f in _fields(type(value)):
        held = getattr(value, f.name)
        if held is None or (f.default is not MISSING and held == f.default and not f.rules.always):
            continue
        out[f.key] = _json(held, f.hint, f.rules)
    return out


def _json(held: Any, hint: Any, rules: Prop) -> Any:
    hint = _optional(hint)
    if rules.duration:
        return format_duration(held)
    if isinstance(held, enum.Enum):
        return held.value
    if dataclasses.is_dataclass(held):
        return dump(held)
    if isinstance(held, tuple):
        item = typing.get_args(hint)[0] if typing.get_args(hint) else Any
        return [_json(v, item, Prop()) for v in held]
    if isinstance(held, Mapping):
        return dict(held)
    return held
