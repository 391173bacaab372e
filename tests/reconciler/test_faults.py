"""Faults: the reconciler killed mid-rollout and restarted; kube-apiserver restarted under a running loop;
two replicas with one Lease."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from gitrepo import CONFIG_YAML, nodes_yaml
from kubernetes import client as k8s
from reconciler_harness import agent_reports, condition, eventually, labels_of, migsync

from migops.api.migsync import SyncSpec, TrustPolicy, migsync_object
from migops.api.names import MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL
from migops.kube import ssa
from migops.local.process import stop as stop_process
from migops.reconciler.controller import Reconciler
from migops.reconciler.main import ServeOptions, serve

MIGOPS = Path(sys.executable).parent / "migops"


def _busy(api, names: list[str], config: str) -> list[str]:
    got = labels_of(api, names)
    return [
        n for n in names if got[n].get(MIG_CONFIG_LABEL) == config and got[n].get(MIG_CONFIG_STATE_LABEL) != "success"
    ]


def _start(rplane, repo, tmp_path: Path, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            str(MIGOPS),
            "reconcile",
            "--repo",
            repo.url,
            "--ref",
            "main",
            "--name",
            name,
            "--kubeconfig",
            str(rplane.admin_kubeconfig),
            "--no-leader-elect",
            "--http-address",
            "127.0.0.1:0",
            "--interval",
            "1s",
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # SIGKILLed below, it runs no atexit: the client library's credential files stay in tmp_path.
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )


def test_killed_mid_rollout_then_restarted_converges(rplane, rapi, repo, gpu_nodes, tmp_path) -> None:
    names = gpu_nodes(8, pool="kill")
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": nodes_yaml(
                "  - nodeSelector: {matchLabels: {pool: kill}}\n    config: all-1g.10gb", max_unavailable=2
            ),
        }
    )
    proc = _start(rplane, repo, tmp_path, "killme")
    seen_busy = 0
    killed = False
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            busy = _busy(rapi, names, "all-1g.10gb")
            seen_busy = max(seen_busy, len(busy))
            labelled = sum(
                1 for n, labels in labels_of(rapi, names).items() if labels.get(MIG_CONFIG_LABEL) == "all-1g.10gb"
            )
            if not killed and labelled >= 4 and busy:
                os.killpg(proc.pid, signal.SIGKILL)  # no goodbye: nothing flushed, nothing released
                proc.wait(10)
                killed = True
                proc = _start(rplane, repo, tmp_path, "killme")
            agent_reports(rapi, CONFIG_YAML, busy)
            if killed and labelled == len(names) and not _busy(rapi, names, "all-1g.10gb"):
                ready = condition(migsync(rapi, "killme"), "Ready") if "status" in migsync(rapi, "killme") else {}
                if ready.get("status") == "True":
                    break
            time.sleep(0.3)
        else:
            raise AssertionError(f"did not converge; log:\n{_stop(proc)}")
    finally:
        log = _stop(proc)
    assert killed
    assert seen_busy <= 2, log  # waves held across the restart
    assert migsync(rapi, "killme")["status"]["summary"]["inSync"] == "8/8"


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.stdout.read().decode(errors="replace") if proc.stdout else ""


def test_apiserver_restart_watches_resume(rplane, rapi, repo, gpu_nodes, make_reconciler) -> None:
    names = gpu_nodes(2, pool="restart")
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": nodes_yaml("  - nodeSelector: {matchLabels: {pool: restart}}\n    config: all-3g.40gb"),
        }
    )
    rec = make_reconciler(repo.url)
    stop = threading.Event()
    loop = threading.Thread(target=rec.run, kwargs={"stop": stop}, daemon=True)
    loop.start()
    try:
        eventually(lambda: {labels_of(rapi, names)[n].get(MIG_CONFIG_LABEL) for n in names} == {"all-3g.40gb"})
        agent_reports(rapi, CONFIG_YAML, names)
        lists = rec.nodes.lists
        stop_process(rplane.processes["kube-apiserver"], timeout=30)
        time.sleep(1.0)  # the loop and the informers meet a dead server
        rplane._start_apiserver()
        with rplane.api_client() as api:
            eventually(lambda: _try(lambda: k8s.CoreV1Api(api).read_node(names[0])))
            # A hand edit after the restart: seen (the watch is back) and put back.
            k8s.CoreV1Api(api).patch_node(names[0], {"metadata": {"labels": {MIG_CONFIG_LABEL: "all-disabled"}}})
            eventually(
                lambda: k8s.CoreV1Api(api).read_node(names[0]).metadata.labels[MIG_CONFIG_LABEL] == "all-3g.40gb"
            )
        assert rec.nodes.lists > lists  # it listed again after the outage
        assert rec.nodes.last_error is None
    finally:
        stop.set()
        loop.join(30)


def test_two_replicas_one_leader_and_takeover(rplane, rapi, repo, gpu_nodes, tmp_path) -> None:
    names = gpu_nodes(2, pool="ha")
    repo.commit(
        {
            "config.yaml": CONFIG_YAML,
            "nodes.yaml": nodes_yaml("  - nodeSelector: {matchLabels: {pool: ha}}\n    config: all-1g.10gb"),
        }
    )
    spec = SyncSpec(repo.url, "main", "", 60.0, False, TrustPolicy())
    ssa.apply(rapi, migsync_object("ha", "migops-system", spec), field_manager="migops-test", force=True)
    # A lease long enough that a loaded machine never lets it lapse between renewals (the leader stepping
    # down is the SIGTERM path below, which releases the Lease at once, so the takeover stays quick).
    options = ServeOptions("127.0.0.1", 0, leader_elect=True, lease_duration=15, renew_deadline=10, retry_period=0.3)
    replicas = []
    for i in range(2):
        rec = Reconciler(rapi, name="ha", namespace="migops-system", cache_dir=tmp_path / f"cache{i}")
        stop = threading.Event()
        thread = threading.Thread(
            target=serve,
            args=(rec, ServeOptions(**{**options.__dict__, "identity": f"replica-{i}"}), stop),
            daemon=True,
        )
        thread.start()
        replicas.append((rec, stop, thread))
    try:
        eventually(lambda: {labels_of(rapi, names)[n].get(MIG_CONFIG_LABEL) for n in names} == {"all-1g.10gb"})
        leaders = [r for r, _, _ in replicas if r.metrics.leader._value.get() == 1]
        assert len(leaders) == 1
        leader = leaders[0]
        assert leader.metrics.writes("nodes") == 2
        assert [r for r, _, _ in replicas if r is not leader][0].metrics.writes() == 0
        holder = (
            k8s.CoordinationV1Api(rapi)
            .read_namespaced_lease("migops-reconciler-ha", "migops-system")
            .spec.holder_identity
        )
        # The leader goes (SIGTERM path: releases the Lease); the standby takes over and keeps the cluster right.
        index = [r for r, _, _ in replicas].index(leader)
        replicas[index][1].set()
        replicas[index][2].join(30)
        standby = replicas[1 - index][0]
        eventually(lambda: standby.metrics.leader._value.get() == 1, timeout=20)
        new_holder = (
            k8s.CoordinationV1Api(rapi)
            .read_namespaced_lease("migops-reconciler-ha", "migops-system")
            .spec.holder_identity
        )
        assert {holder, new_holder} == {"replica-0", "replica-1"}
        k8s.CoreV1Api(rapi).patch_node(names[1], {"metadata": {"labels": {MIG_CONFIG_LABEL: "all-disabled"}}})
        eventually(lambda: labels_of(rapi, names)[names[1]][MIG_CONFIG_LABEL] == "all-1g.10gb")
        # The write is counted once its response is read: the label can show before that.
        eventually(lambda: standby.metrics.writes("nodes") >= 1, timeout=10)
        assert standby.metrics.writes("nodes") == 1
    finally:
        for _, stop, thread in replicas:
            stop.set()
            thread.join(30)


def _try(call) -> bool:
    try:
        call()
        return True
    except Exception:  # noqa: BLE001
        return False
