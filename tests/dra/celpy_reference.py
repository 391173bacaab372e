"""The selectors' second opinion: the same Kubernetes CEL library on cel-python (pure Python), the
runtime migops used before its selectors moved to a compiled one. tests/dra/test_cel_equivalence.py
checks that both give the same answers on the selector corpus, and bench/dra_selectors.py times both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes

from migops.mig.dra import DRIVER
from migops.mig.selectors import CelError, parse_quantity

Obj = Mapping[str, Any]
MAX_EXPRESSION = 10 * 1024


@dataclass(frozen=True, order=True)
class Quantity:
    """k8s.io/apimachinery resource.Quantity in CEL (quantity('10Gi'))."""

    value: Decimal


@dataclass(frozen=True)
class Semver:
    """blang/semver in CEL (semver('1.2.3')), as Kubernetes' semver library parses it."""

    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()

    def key(self) -> tuple[Any, ...]:
        # A pre-release sorts before its release; identifiers compare numerically when numeric.
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, pre)


_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def _semver(text: object, normalize: object = False) -> Semver:
    raw = str(text)
    if normalize:  # semver(s, true): a leading v, missing minor/patch and leading zeros are accepted
        m = re.match(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$", raw)
        if m:
            raw = ".".join(str(int(p or 0)) for p in m.groups()[:3]) + m[4]
    m = _SEMVER.match(raw)
    if not m:
        raise CelError(f"could not parse {str(text)!r} as semver")
    return Semver(int(m[1]), int(m[2]), int(m[3]), tuple(m[4].split(".")) if m[4] else ())


def _quantity(text: object) -> Quantity:
    try:
        return Quantity(parse_quantity(str(text)))
    except ValueError as exc:
        raise CelError(f"invalid quantity {str(text)!r}: {exc}") from None


def _is(parse: Callable[..., object]) -> Callable[..., celtypes.BoolType]:
    def check(*args: object) -> celtypes.BoolType:
        try:
            parse(*args)
        except CelError:
            return celtypes.BoolType(False)
        return celtypes.BoolType(True)

    return check


def _cmp(a: object, b: object) -> int:
    if isinstance(a, Quantity):
        other = b.value if isinstance(b, Quantity) else Decimal(int(b)) if isinstance(b, int) else None
        if other is None:
            raise CelError(f"cannot compare a quantity with {type(b).__name__}")
        return (a.value > other) - (a.value < other)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return (a.key() > b.key()) - (a.key() < b.key())
    raise CelError(f"no such overload: {type(a).__name__}.compareTo({type(b).__name__})")


def _arith(sign: int) -> Callable[[object, object], Quantity]:
    def op(a: object, b: object) -> Quantity:
        if not isinstance(a, Quantity):
            raise CelError("add/sub: expected a quantity")
        other = b.value if isinstance(b, Quantity) else Decimal(int(b)) if isinstance(b, int) else None
        if other is None:
            raise CelError("add/sub: expected a quantity or an int")
        return Quantity(a.value + sign * other)

    return op


def _index_of(a: object, b: object, *start: object) -> celtypes.IntType:
    if isinstance(a, str):
        return celtypes.IntType(a.find(str(b), int(start[0]) if start else 0))  # type: ignore[call-overload]
    if isinstance(a, list):
        return celtypes.IntType(a.index(b) if b in a else -1)
    raise CelError("indexOf: expected a string or a list")


def _int_of(a: object) -> celtypes.IntType:
    if not isinstance(a, Quantity) or a.value != a.value.to_integral_value():
        raise CelError("asInteger: not an integer quantity")
    return celtypes.IntType(int(a.value))


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is(_quantity),
    "semver": _semver,
    "isSemver": _is(_semver),
    "compareTo": lambda a, b: celtypes.IntType(_cmp(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_cmp(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_cmp(a, b) < 0),
    "add": _arith(1),
    "sub": _arith(-1),
    "asInteger": _int_of,
    "isInteger": lambda a: celtypes.BoolType(isinstance(a, Quantity) and a.value == a.value.to_integral_value()),
    "asApproximateFloat": lambda a: celtypes.DoubleType(float(a.value)),
    "sign": lambda a: celtypes.IntType((a.value > 0) - (a.value < 0)),
    "major": lambda a: celtypes.IntType(a.major),
    "minor": lambda a: celtypes.IntType(a.minor),
    "patch": lambda a: celtypes.IntType(a.patch),
    # cel-go's strings extension, which Kubernetes enables.
    "lowerAscii": lambda s: celtypes.StringType(str(s).lower()),
    "upperAscii": lambda s: celtypes.StringType(str(s).upper()),
    "trim": lambda s: celtypes.StringType(str(s).strip()),
    "replace": lambda s, a, b, *n: celtypes.StringType(str(s).replace(str(a), str(b), *(int(x) for x in n))),
    "split": lambda s, sep, *n: celtypes.ListType(
        [celtypes.StringType(p) for p in str(s).split(str(sep), *(int(x) - 1 for x in n if int(x) > 0))]
    ),
    "join": lambda items, *sep: celtypes.StringType((str(sep[0]) if sep else "").join(str(i) for i in items)),
    "substring": lambda s, a, *b: celtypes.StringType(str(s)[int(a) : int(b[0]) if b else None]),
    "charAt": lambda s, i: celtypes.StringType(str(s)[int(i) : int(i) + 1]),
    "indexOf": _index_of,
    "lastIndexOf": lambda s, b: celtypes.IntType(str(s).rfind(str(b))),
}

_ENV = celpy.Environment()


@lru_cache(maxsize=512)  # bounded: expressions come from untrusted objects
def compile_selector(expression: str) -> celpy.Runner:
    """A compiled selector, or CelError naming the problem (cached: claims repeat their classes')."""
    if len(expression) > MAX_EXPRESSION:
        raise CelError(f"longer than {MAX_EXPRESSION} characters")
    try:
        return _ENV.program(_ENV.compile(expression), functions=_FUNCTIONS)
    except celpy.CELParseError as exc:
        raise CelError(f"does not compile: {str(exc).splitlines()[0]}") from None
    except (RecursionError, Exception) as exc:  # noqa: BLE001 -- untrusted text: nesting too deep, ...
        raise CelError(f"does not compile: {type(exc).__name__}") from None


def _cel_value(value: Any) -> Any:
    if isinstance(value, Quantity | Semver):
        return value
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, list):
        return celtypes.ListType([_cel_value(v) for v in value])
    if isinstance(value, Mapping):
        return celtypes.MapType({celtypes.StringType(k): _cel_value(v) for k, v in value.items()})
    raise CelError(f"unsupported value {value!r}")


def _attribute(value: Obj) -> Any:
    """A v1 DeviceAttribute (exactly one of int, bool, string, version, and the list forms) in CEL."""
    for kind, convert in (("string", str), ("int", int), ("bool", bool), ("version", _semver)):
        if kind in value:
            return convert(value[kind])
    for kind in ("strings", "ints", "bools", "versions"):
        if isinstance(value.get(kind), list):
            return [_semver(v) if kind == "versions" else v for v in value[kind]]
    raise CelError(f"attribute without a value: {dict(value)!r}")


def _qualified(name: str, driver: str) -> tuple[str, str]:
    """A v1 QualifiedName: `domain/id`, or `id` in the driver's own domain."""
    domain, sep, ident = name.rpartition("/")
    return (domain, ident) if sep else (driver, name)


def cel_device(device: Obj, driver: str = DRIVER) -> Any:
    """The `device` variable of a selector for a v1 Device entry (attributes and capacity by domain)."""
    attributes: dict[str, dict[str, Any]] = {driver: {}}
    capacity: dict[str, dict[str, Any]] = {driver: {}}
    for name, value in (device.get("attributes") or {}).items():
        domain, ident = _qualified(name, driver)
        attributes.setdefault(domain, {})[ident] = _attribute(value)
    for name, value in (device.get("capacity") or {}).items():
        domain, ident = _qualified(name, driver)
        capacity.setdefault(domain, {})[ident] = _quantity(value.get("value", "0"))
    return _cel_value(
        {
            "driver": driver,
            "attributes": attributes,
            "capacity": capacity,
            "allowMultipleAllocations": bool(device.get("allowMultipleAllocations", False)),
        }
    )


def selects(expression: str, device: Any) -> bool:
    """Whether a selector accepts a device (cel_device's value); CelError when it fails on it, which
    the scheduler treats as an allocation failure, not as a non-match."""
    program = compile_selector(expression)
    try:
        result = program.evaluate({"device": device})
    except Exception as exc:  # noqa: BLE001 -- untrusted selectors: any failure is the selector's
        raise CelError(_eval_message(exc)) from None
    if isinstance(result, celpy.CELEvalError):
        raise CelError(_eval_message(result))
    if not isinstance(result, celtypes.BoolType | bool):
        raise CelError(f"evaluates to {type(result).__name__}, not bool")
    return bool(result)


def _eval_message(exc: BaseException) -> str:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    # CELEvalError(message, exception class, exception args): our library's own message when it raised.
    if len(args) >= 3 and isinstance(args[1], type) and issubclass(args[1], CelError) and args[2]:
        return str(args[2][0])
    return str(args[0]) if args else type(exc).__name__


def missing_key(message: str) -> str | None:
    m = re.search(r"no such member in mapping: '([^']+)'", message)
    return m[1] if m else None
