"""DRA selectors: CEL with the parts of Kubernetes' CEL library that resource.k8s.io selectors use.

Pure: no Kubernetes client, no I/O. Expressions are compiled and evaluated by cel-expr-python, Google's
CEL runtime (C++), with cel-go's strings extension as Kubernetes enables it and Kubernetes' quantity()
and semver() libraries (their comparison methods, quantity arithmetic) written here in Python.

A Quantity or a Semver is a CEL map with one key naming its kind, holding its canonical text, so that
`==` between two of them is Kubernetes' equality (quantity('1Gi') == quantity('1024Mi')) and the methods
below tell the two kinds apart. The `device` variable is a plain dict (cel_device).

Expressions are parsed, not type-checked, when compiled: `device` is a dynamic value here (the API
server's typed declaration of it is a protobuf-free map), and the runtime's checker refuses a
comprehension over a dynamic value that the API server's accepts. A type error (`'a' < 1`) is a failure
on evaluation instead, which the webhook reports the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings

MAX_EXPRESSION = 10 * 1024  # resource.k8s.io's CELSelectorExpressionMaxLength: the API refuses longer ones
QUANTITY = "k8s.io/quantity"  # the key of a Quantity's map
SEMVER = "k8s.io/semver"  # the key of a Semver's map


class CelError(ValueError):
    """A selector that does not compile, or that fails on a device (the scheduler fails it too)."""


# --- Quantity (k8s.io/apimachinery resource.Quantity) ---------------------------------------------------

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY_TEXT = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))((?:[eE][+-]?\d+)|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


def parse_quantity(text: str) -> Decimal:
    """resource.ParseQuantity's value: a number with a binary-SI, decimal-SI or exponent suffix. (The
    Kubernetes client's parse_quantity does the same, but importing it loads the whole client.)"""
    m = _QUANTITY_TEXT.match(text)
    if not m:
        raise CelError(f"invalid quantity {text!r}")
    number, suffix = Decimal(m[1]), m[2]
    if suffix in _BINARY:
        return number * Decimal(1024 ** _BINARY[suffix])
    if suffix[:1] in ("e", "E"):
        return number.scaleb(int(suffix[1:]))
    return number.scaleb(_DECIMAL[suffix])


def _canonical(value: Decimal) -> str:
    return format(value.normalize(), "f") if value else "0"


def quantity(text: object) -> dict[str, str]:
    return {QUANTITY: _canonical(parse_quantity(str(text)))}


def _quantity_of(value: object, *, ints: bool = False) -> Decimal:
    """The value of a Quantity argument (or of an int, where Kubernetes takes one)."""
    if isinstance(value, Mapping) and QUANTITY in value:
        return Decimal(value[QUANTITY])
    if ints and isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    raise CelError(f"no such overload: expected a quantity, got {_kind(value)}")


# --- Semver (blang/semver, as Kubernetes' semver library parses it) ------------------------------------

_SEMVER_TEXT = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


@dataclass(frozen=True)
class Semver:
    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()

    def key(self) -> tuple[Any, ...]:
        # A pre-release sorts before its release; identifiers compare numerically when numeric.
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, pre)

    def text(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}" + (f"-{'.'.join(self.pre)}" if self.pre else "")


def parse_semver(text: str, normalize: bool = False) -> Semver:
    """semver(s), or semver(s, true): a leading v, missing minor/patch and leading zeros accepted."""
    raw = text
    if normalize:
        m = re.match(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$", raw)
        if m:
            raw = ".".join(str(int(p or 0)) for p in m.groups()[:3]) + m[4]
    m = _SEMVER_TEXT.match(raw)
    if not m:
        raise CelError(f"could not parse {text!r} as semver")
    return Semver(int(m[1]), int(m[2]), int(m[3]), tuple(m[4].split(".")) if m[4] else ())


def semver(text: object, normalize: object = False) -> dict[str, str]:
    return {SEMVER: parse_semver(str(text), bool(normalize)).text()}


def _semver_of(value: object) -> Semver:
    if isinstance(value, Mapping) and SEMVER in value:
        return parse_semver(value[SEMVER])
    raise CelError(f"no such overload: expected a semver, got {_kind(value)}")


def _kind(value: object) -> str:
    if isinstance(value, Mapping):
        return "quantity" if QUANTITY in value else "semver" if SEMVER in value else "map"
    return type(value).__name__


# --- the methods both kinds share, and quantity arithmetic ----------------------------------------------


def compare(a: object, b: object) -> int:
    if isinstance(a, Mapping) and SEMVER in a:
        x, y = _semver_of(a).key(), _semver_of(b).key()
    else:
        x, y = _quantity_of(a), _quantity_of(b)  # type: ignore[assignment]
    return (x > y) - (x < y)


def _arith(sign: int) -> Callable[[object, object], dict[str, str]]:
    def op(a: object, b: object) -> dict[str, str]:
        return {QUANTITY: _canonical(_quantity_of(a) + sign * _quantity_of(b, ints=True))}

    return op


def _as_integer(a: object) -> int:
    value = _quantity_of(a)
    if value != value.to_integral_value():
        raise CelError("asInteger: not an integer quantity")
    return int(value)


def _valid(parse: Callable[..., object]) -> Callable[..., bool]:
    def check(*args: object) -> bool:
        try:
            parse(*args)
        except (CelError, InvalidOperation):
            return False
        return True

    return check


# --- the environment -------------------------------------------------------------------------------------

_T = cel.Type


def _overload(name: str, result: cel.Type, params: list[cel.Type], impl: Callable[..., Any], member: bool) -> Any:
    return cel.Overload(name, result, params, is_member=member, impl=impl)


def _functions() -> list[cel.FunctionDecl]:
    """Kubernetes' quantity and semver libraries, as cel-go's k8s.io/apiserver/pkg/cel/library declares them."""
    s, b, i, m, d = _T.STRING, _T.BOOL, _T.INT, _T.MAP, _T.DOUBLE
    table: dict[str, list[tuple[str, cel.Type, list[cel.Type], Callable[..., Any], bool]]] = {
        "quantity": [("quantity_string", m, [s], quantity, False)],
        "isQuantity": [("isQuantity_string", b, [s], _valid(quantity), False)],
        "semver": [
            ("semver_string", m, [s], semver, False),
            ("semver_string_bool", m, [s, b], semver, False),
        ],
        "isSemver": [
            ("isSemver_string", b, [s], _valid(semver), False),
            ("isSemver_string_bool", b, [s, b], _valid(semver), False),
        ],
        "compareTo": [("compareTo_map", i, [m, m], compare, True)],
        "isGreaterThan": [("isGreaterThan_map", b, [m, m], lambda x, y: compare(x, y) > 0, True)],
        "isLessThan": [("isLessThan_map", b, [m, m], lambda x, y: compare(x, y) < 0, True)],
        "add": [("add_map", m, [m, m], _arith(1), True), ("add_map_int", m, [m, i], _arith(1), True)],
        "sub": [("sub_map", m, [m, m], _arith(-1), True), ("sub_map_int", m, [m, i], _arith(-1), True)],
        "asInteger": [("asInteger_map", i, [m], _as_integer, True)],
        "isInteger": [("isInteger_map", b, [m], _valid(_as_integer), True)],
        "asApproximateFloat": [("asApproximateFloat_map", d, [m], lambda x: float(_quantity_of(x)), True)],
        "sign": [("sign_map", i, [m], lambda x: compare(x, {QUANTITY: "0"}), True)],
        "major": [("major_map", i, [m], lambda x: _semver_of(x).major, True)],
        "minor": [("minor_map", i, [m], lambda x: _semver_of(x).minor, True)],
        "patch": [("patch_map", i, [m], lambda x: _semver_of(x).patch, True)],
    }
    return [cel.FunctionDecl(name, [_overload(*o) for o in overloads]) for name, overloads in table.items()]


_ENV = cel.NewEnv(variables={"device": _T.DYN}, extensions=[ext_strings.ExtStrings()], functions=_functions())


@lru_cache(maxsize=512)  # bounded: expressions come from untrusted objects
def compile_selector(expression: str) -> Any:
    """A compiled selector, or CelError naming the problem (cached: claims repeat their classes')."""
    if len(expression) > MAX_EXPRESSION:
        raise CelError(f"longer than {MAX_EXPRESSION} characters")
    try:
        return _ENV.compile(expression, disable_check=True)
    except RuntimeError as exc:
        raise CelError(f"does not compile: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).removeprefix("INVALID_ARGUMENT: ").removeprefix("ERROR: <input>:")
    return text.splitlines()[0] if text else type(exc).__name__


def selects(expression: str, device: Mapping[str, Any]) -> bool:
    """Whether a selector accepts a device (cel_device's value); CelError when it fails on it, which
    the scheduler treats as an allocation failure, not as a non-match."""
    try:
        result = compile_selector(expression).eval(data={"device": device})
    except RuntimeError as exc:
        raise CelError(str(exc)) from None
    kind = result.type()
    if kind == _T.ERROR:
        raise CelError(_STATUS.sub("", str(result.value()), count=1))
    if kind != _T.BOOL:
        raise CelError(f"evaluates to {kind.name()}, not bool")
    return bool(result.value())


_STATUS = re.compile(r"^[A-Z_]+: ")  # the runtime's status code before its message
_MISSING = re.compile(r'Key not found in map : "([^"]+)"')


def missing_key(message: str) -> str | None:
    """The map key whose absence made a selector fail ('uuid'), from its failure."""
    m = _MISSING.search(message)
    return m[1] if m else None


# --- the device -----------------------------------------------------------------------------------------


def _attribute(value: Mapping[str, Any]) -> Any:
    """A v1 DeviceAttribute (exactly one of int, bool, string, version, and the list forms) in CEL."""
    for kind, convert in (("string", str), ("int", int), ("bool", bool), ("version", semver)):
        if kind in value:
            return convert(value[kind])
    for kind in ("strings", "ints", "bools", "versions"):
        if isinstance(value.get(kind), list):
            return [semver(v) if kind == "versions" else v for v in value[kind]]
    raise CelError(f"attribute without a value: {dict(value)!r}")


def _qualified(name: str, driver: str) -> tuple[str, str]:
    """A v1 QualifiedName: `domain/id`, or `id` in the driver's own domain."""
    domain, sep, ident = name.rpartition("/")
    return (domain, ident) if sep else (driver, name)


def cel_device(device: Mapping[str, Any], driver: str) -> dict[str, Any]:
    """The `device` variable of a selector for a v1 Device entry (attributes and capacity by domain)."""
    attributes: dict[str, dict[str, Any]] = {driver: {}}
    capacity: dict[str, dict[str, Any]] = {driver: {}}
    for name, value in (device.get("attributes") or {}).items():
        domain, ident = _qualified(name, driver)
        attributes.setdefault(domain, {})[ident] = _attribute(value)
    for name, value in (device.get("capacity") or {}).items():
        domain, ident = _qualified(name, driver)
        capacity.setdefault(domain, {})[ident] = quantity(value.get("value", "0"))
    return {
        "driver": driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": bool(device.get("allowMultipleAllocations", False)),
    }
