"""One logging interface (migops.logs): --log-level and --log-format spelled the same on the webhook,
the reconciler and the agent; JSON lines parsed back, from the formatter and from the real processes
(gunicorn's own lines included)."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from migops import logs
from migops.cli import build_parser

MIGOPS = Path(sys.executable).parent / "migops"


def _subcommand(name: str):
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    return sub.choices[name]


@pytest.mark.parametrize("command", ["webhook", "reconcile", "agent"])
def test_the_same_flags_on_every_component(command: str) -> None:
    options = {o: a for a in _subcommand(command)._actions for o in a.option_strings}
    assert tuple(options["--log-level"].choices) == ("debug", "info", "warning", "error")
    assert tuple(options["--log-format"].choices) == ("text", "json")


def test_json_lines_carry_time_level_component_message_and_object() -> None:
    out = io.StringIO()
    logs.setup("reconciler", "debug", "json", {"migsync": "migops-system/migops"}, stream=out)
    try:
        log = logging.getLogger("migops.test")
        log.debug("applied %s", "wave 1", extra={"node": "gpu-1", "revision": "abc123"})
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    finally:
        logging.getLogger().handlers.clear()
    first, second = [json.loads(line) for line in out.getvalue().splitlines()]
    assert first["time"].endswith("Z") and first["time"][10] == "T"
    assert {k: first[k] for k in ("level", "component", "logger", "message", "node", "migsync", "revision")} == {
        "level": "debug",
        "component": "reconciler",
        "logger": "migops.test",
        "message": "applied wave 1",
        "node": "gpu-1",
        "migsync": "migops-system/migops",
        "revision": "abc123",
    }
    assert second["level"] == "error" and "ValueError: boom" in second["error"]


def test_text_lines_name_the_same_fields() -> None:
    out = io.StringIO()
    logs.setup("agent", "info", "text", {"node": "gpu-1"}, stream=out)
    try:
        logging.getLogger("migops.agent").info("applied", extra={"revision": "abc"})
        logging.getLogger("migops.agent").debug("not shown")
    finally:
        logging.getLogger().handlers.clear()
    (line,) = out.getvalue().splitlines()
    assert line.split(" ", 1)[1] == "INFO agent migops.agent: applied node=gpu-1 revision=abc"


def test_bound_objects_reach_a_pools_threads_only_when_carried() -> None:
    """The reconciler writes labels from a thread pool: its lines name the revision of the sync."""
    from concurrent.futures import ThreadPoolExecutor

    out = io.StringIO()
    logs.setup("reconciler", "info", "json", stream=out)
    try:
        log = logging.getLogger("migops.test")
        with logs.bound(revision="abc"), ThreadPoolExecutor(2) as pool:
            list(pool.map(logs.carried(lambda n: log.info("carried %s", n)), ["a", "b"]))
            list(pool.map(lambda n: log.info("plain %s", n), ["c"]))
        log.info("after")
    finally:
        logging.getLogger().handlers.clear()
    seen = {d["message"]: d.get("revision") for d in map(json.loads, out.getvalue().splitlines())}
    assert seen == {"carried a": "abc", "carried b": "abc", "plain c": None, "after": None}


def test_gunicorn_lines_through_the_same_formatter(tmp_path: Path) -> None:
    """The webhook with --log-format json: gunicorn's master and worker lines are JSON too. The worker
    cannot reach a cluster (no kubeconfig anywhere), so it fails to boot and gunicorn stops: every line
    it wrote on the way, the traceback included, is one JSON object."""
    certs = subprocess.run(
        [str(MIGOPS), "certs", "generate", "--dir", str(tmp_path / "tls")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert certs.returncode == 0, certs.stderr
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [
            str(MIGOPS),
            "webhook",
            "--tls-cert",
            str(tmp_path / "tls" / "tls.pem"),
            "--tls-key",
            str(tmp_path / "tls" / "tls.pem"),
            "--bind-address",
            "127.0.0.1",
            "--port",
            "0",
            "--log-format",
            "json",
            "--log-level",
            "debug",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    lines, bare = [], []
    for line in filter(str.strip, proc.stderr.splitlines()):
        try:
            lines.append(json.loads(line))
        except ValueError:
            bare.append(line)
    # gunicorn print()s a crashed worker's exception once more, bare (arbiter.spawn_worker): that line
    # alone is not JSON, and it is in the JSON line's traceback already.
    assert all(any(b in d.get("error", "") for d in lines) for b in bare) and len(bare) <= 1, proc.stderr
    assert {d["component"] for d in lines} == {"webhook"}
    assert any(d["logger"] == "gunicorn.error" and "Starting gunicorn" in d["message"] for d in lines), proc.stderr
    assert any("no kubeconfig" in d.get("error", "") + d["message"] for d in lines), proc.stderr


def test_objects_bound_to_a_block() -> None:
    out = io.StringIO()
    logs.setup("reconciler", "info", "json", stream=out)
    try:
        log = logging.getLogger("migops.test")
        with logs.bound(revision="abc", migsync="ns/a"):
            log.info("inside", extra={"node": "n1"})
        log.info("outside")
    finally:
        logging.getLogger().handlers.clear()
    inside, outside = [json.loads(line) for line in out.getvalue().splitlines()]
    assert (inside["revision"], inside["migsync"], inside["node"]) == ("abc", "ns/a", "n1")
    assert not {"revision", "migsync", "node"} & set(outside)
