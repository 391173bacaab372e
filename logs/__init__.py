"""One logging interface for the webhook, the reconciler and the agent (and gunicorn inside the webhook).

    --log-level debug|info|warning|error      (default info)
    --log-format text|json                    (default text; the manifests use json)

JSON is one object per line, as cluster log pipelines read it (Flux's controllers, Kyverno and Argo CD
log so): `time` (RFC 3339, UTC, milliseconds), `level`, `component` (webhook, reconciler, agent),
`logger`, `message`, and the object the line is about when the caller names it or the process is about
one: `node`, `migsync` (namespace/name), `revision`; `error` holds an exception's traceback. A caller
names the object with `extra=`:

    log.info("applied", extra={"node": name, "revision": rev})

or for everything logged in a block, in this thread (a sync of one revision, the reconfiguration of one
node):

    with logs.bound(revision=rev):
        ...

A pool's threads start without what is bound; `logs.carried(fn)` runs fn there with it.

Text is the same fields for a person: `time LEVEL component logger: message node=... revision=...`.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any, ParamSpec, TypeVar

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
# The fields that say which object a line is about, in the order they are shown.
OBJECT_FIELDS = ("node", "migsync", "revision", "namespace", "configmap", "pod")


P = ParamSpec("P")
T = TypeVar("T")
_BOUND: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("migops_log_objects", default=None)


@contextlib.contextmanager
def bound(**objects: str) -> Iterator[None]:
    """Name the object(s) every line logged inside the block is about (see the module docstring)."""
    token = _BOUND.set({**(_BOUND.get() or {}), **objects})
    try:
        yield
    finally:
        _BOUND.reset(token)


def carried(fn: Callable[P, T]) -> Callable[P, T]:
    """fn, run with the objects bound where this is called (for a pool's threads, which start without)."""
    context = contextvars.copy_context()

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return context.copy().run(fn, *args, **kwargs)  # a Context can be entered by one thread at a time

    return run


def add_arguments(parser: argparse.ArgumentParser, default_level: str = "info") -> None:
    """--log-level and --log-format, spelled the same on every long-running command."""
    parser.add_argument(
        "--log-level",
        default=default_level,
        choices=LEVELS,
        type=str.lower,
        help=f"least severe level logged (default {default_level})",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=FORMATS,
        help="text (default) or json: one object per line (time, level, component, logger, "
        "message, and node / migsync / revision when a line is about one)",
    )


def _time(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class _Base(logging.Formatter):
    def __init__(self, component: str = "migops", context: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.component = component
        self.context = dict(context or {})

    def objects(self, record: logging.LogRecord) -> dict[str, str]:
        found = {**self.context, **(_BOUND.get() or {})}
        for key in OBJECT_FIELDS:
            value = record.__dict__.get(key)
            if value is not None:
                found[key] = str(value)
        return {k: found[k] for k in OBJECT_FIELDS if k in found}


class JsonFormatter(_Base):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname.lower(),
            "component": self.component,
            "logger": record.name,
            "message": record.getMessage(),
            **self.objects(record),
        }
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["error"] = record.exc_text
        return json.dumps(doc, ensure_ascii=False, default=str)


class TextFormatter(_Base):
    """The same fields for a person, on one line (a traceback follows on its own lines)."""

    def format(self, record: logging.LogRecord) -> str:
        objects = "".join(f" {k}={v}" for k, v in self.objects(record).items())
        line = f"{_time(record)} {record.levelname} {self.component} {record.name}: {record.getMessage()}{objects}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def formatter(fmt: str, component: str, context: Mapping[str, str] | None = None) -> logging.Formatter:
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: one of {', '.join(FORMATS)}")
    return (JsonFormatter if fmt == "json" else TextFormatter)(component, context)


def _level(level: str) -> int:
    if level.lower() not in LEVELS:
        raise ValueError(f"log level {level!r}: one of {', '.join(LEVELS)}")
    number: int = logging.getLevelNamesMapping()[level.upper()]
    return number


def setup(
    component: str,
    level: str = "info",
    fmt: str = "text",
    context: Mapping[str, str] | None = None,
    stream: IO[str] | None = None,
) -> None:
    """The root logger: one handler to stderr (or `stream`) with the chosen format; replaces any other."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(fmt, component, context))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(_level(level))


def from_args(args: argparse.Namespace, component: str, context: Mapping[str, str] | None = None) -> None:
    setup(component, args.log_level, args.log_format, context)


def gunicorn_logconfig(component: str, level: str = "info", fmt: str = "text") -> dict[str, Any]:
    """gunicorn's `logconfig_dict`: its error log, and the root logger its workers' code logs to, through
    the same formatter (the access log is off: the webhook's metrics count requests)."""
    _level(level)
    formatter(fmt, component)  # checks fmt
    handler = {"class": "logging.StreamHandler", "formatter": "migops", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "migops": {
                "()": f"{__name__}.{'JsonFormatter' if fmt == 'json' else 'TextFormatter'}",
                "component": component,
            }
        },
        "handlers": {"migops": handler},
        "root": {"level": level.upper(), "handlers": ["migops"]},
        "loggers": {
            "gunicorn.error": {"level": level.upper(), "handlers": ["migops"], "propagate": False},
            "gunicorn.access": {"level": level.upper(), "handlers": ["migops"], "propagate": False},
        },
    }
