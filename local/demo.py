"""`make demo`: the whole migops story on one machine, with no GPU and no cluster.

A real etcd + kube-apiserver + kube-scheduler on loopback, seeded as a GPU Operator cluster with three
GPU nodes (two with H100 80GB, one with A100 40GB, two GPUs each, simulated); the admission webhook
registered with the API server; one migops agent per node driving simulated GPUs; the reconciler
following a config repo (examples/config-repo, committed to a throwaway git repository). Then:

1. the first sync: every node reaches `success`, with GFD's labels and allocatable MIG resources;
2. a commit with a geometry that cannot be placed: not applied, the status names file, path and reason;
3. `kubectl apply` of a bad MIG ConfigMap and `kubectl label` naming a missing config: denied;
4. a valid change: rolled out in waves within maxUnavailable, the agents report `success`;
5. a GPU changed by hand (`migops sim`, as `nvidia-smi mig -dgi` on a real node): the agent sees the
   drift, publishes what is really there, and repairs it;
6. MIG workloads: a Pod per MIG resource, bound by the real scheduler (never run: no kubelet here);
7. a summary of every node and a picture of every GPU's slices.

Everything is torn down at the end; `KEEP=1 make demo` leaves it running for exploring.
Exit status 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client as k8s

from migops.api import objects
from migops.api.names import (
    APPLIED_ANNOTATION,
    DIGEST_ANNOTATION,
    DRIFT_ANNOTATION,
    GPU_PRODUCT_LABEL,
    LAYOUT_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    MIG_RESOURCE_PREFIX,
    NVIDIA_PREFIX,
)
from migops.cli.render import draw_layout, table
from migops.kube.informer import Informer
from migops.local import agents as local_agents
from migops.local import reconciler as local_reconciler
from migops.local import stack, state
from migops.mig.catalogue import catalogue
from migops.mig.gfd import resource_name
from migops.mig.placement import Placement
from migops.mig.spec import parse_config

ROOT = Path(__file__).resolve().parent.parent
CONFIG_REPO = ROOT / "examples" / "config-repo"
H100, A100 = "0x233010DE", "0x20B010DE"
MIGSYNC = ("migops.io", "v1alpha1", "migops-system", "migsyncs", "migops")
WORKLOADS = "mig-demo"
T = TypeVar("T")


class DemoFailed(Exception):
    """A step did not behave as the demo says it does."""


# ------------------------------------------------------------------------------------------ output
class Console:
    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.began = time.monotonic()

    def step(self, number: int, title: str) -> None:
        print(f"\n{'=' * 100}\n[{time.monotonic() - self.began:5.1f}s] Step {number}: {title}\n{'=' * 100}", flush=True)

    def say(self, text: str = "") -> None:
        print(text, flush=True)

    def ok(self, text: str) -> None:
        print(f"  ✔ {text}", flush=True)

    def wait(self, what: str, check: Callable[[], T | None], timeout: float = 120.0) -> T:
        """Poll `check` until it returns a truthy value; waits over a second show what and how long."""
        started = time.monotonic()
        shown = 0.0
        while True:
            value = check()
            elapsed = time.monotonic() - started
            if value:
                if elapsed >= 1.0:
                    self._progress(f"  … waiting for {what} ({elapsed:.1f}s)", final=True)
                return value
            if elapsed > timeout:
                self._progress(f"  … waiting for {what} ({elapsed:.1f}s)", final=True)
                raise DemoFailed(f"gave up waiting for {what} after {timeout:.0f}s")
            if elapsed >= 1.0 and (self.tty or elapsed - shown >= 2.0):
                self._progress(f"  … waiting for {what} ({elapsed:.0f}s)")
                shown = elapsed
            time.sleep(0.2)

    def _progress(self, text: str, final: bool = False) -> None:
        if self.tty:
            sys.stdout.write("\r\033[K" + text + ("\n" if final else ""))
            sys.stdout.flush()
        elif final:
            print(text, flush=True)
        else:
            print(text, flush=True)


# ------------------------------------------------------------------------------------------ the demo
class Rollout:
    """Follows a rollout through the Node watch: prints each node's label and state as they change, and
    counts how many nodes were reconfiguring at once (given their new label, not yet `success` for it)."""

    def __init__(self, desired: dict[str, str], digest: Callable[[str], str], console: Console) -> None:
        self.desired, self.digest, self.c = desired, digest, console
        self.began = time.monotonic()
        self.last: dict[str, tuple[str | None, str | None, bool]] = {}
        self.busy: set[str] = set()
        self.busiest = 0
        self.waves = 0
        self.lock = threading.Lock()

    def seen(self, kind: str, node: dict[str, Any]) -> None:
        meta = objects.meta(node)
        name, labels, notes = meta.get("name"), meta.get("labels") or {}, meta.get("annotations") or {}
        if name not in self.desired:
            return
        label, st = labels.get(MIG_CONFIG_LABEL), labels.get(MIG_CONFIG_STATE_LABEL)
        done = (
            label == self.desired[name]
            and st == "success"
            and notes.get(APPLIED_ANNOTATION) == label
            and notes.get(DIGEST_ANNOTATION) == self.digest(label)
        )
        with self.lock:
            if self.last.get(name) == (label, st, done):
                return
            self.last[name] = (label, st, done)
            if label == self.desired[name] and not done:
                if not self.busy:
                    self.waves += 1
                self.busy.add(name)
            else:
                self.busy.discard(name)
            self.busiest = max(self.busiest, len(self.busy))
            if label == self.desired[name]:
                shown = (
                    "success (applied)"
                    if done
                    else "success (still the previous geometry: the agent has not started)"
                    if st == "success"
                    else st
                )
                self.c.say(
                    f"  [{time.monotonic() - self.began:4.1f}s] {name}: {MIG_CONFIG_LABEL}={label}  "
                    f"{MIG_CONFIG_STATE_LABEL}={shown}   reconfiguring now: {len(self.busy)}"
                )

    def finished(self) -> bool:
        with self.lock:
            return len(self.last) == len(self.desired) and all(done for _, _, done in self.last.values())


class Demo:
    def __init__(self, console: Console, home: Path, repo: Path) -> None:
        self.c = console
        self.home = home
        self.repo = repo
        self.local: state.LocalState | None = None
        self.api: k8s.ApiClient | None = None

    # -------------------------------------------------------------------- plumbing
    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api)

    def run(
        self,
        argv: Sequence[str],
        *,
        expect: int | None = 0,
        show: str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command as a person would type it (kubectl, migops, git), show it and its output."""
        assert self.local is not None
        env = {
            **(env or {}),
            **os.environ,
            "KUBECONFIG": self.local.kubeconfig,
            "MIGOPS_HOME": str(self.home),
            "PATH": f"{self.local.bin_dir}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        }
        self.c.say(f"$ {show or shlex.join(argv)}")
        done = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=120, check=False)
        for line in (done.stdout + done.stderr).rstrip().splitlines():
            self.c.say(f"  {line}")
        if expect is not None and done.returncode != expect:
            raise DemoFailed(f"`{show or shlex.join(argv)}` exited {done.returncode}, expected {expect}")
        return done

    def git(self, *args: str) -> str:
        """git in the config repo, with an identity of its own (works without a global git config)."""
        out = subprocess.run(
            [
                "git",
                "-c",
                "user.name=Platform Team",
                "-c",
                "user.email=platform@example.com",
                "-C",
                str(self.repo),
                *args,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    def commit(self, message: str, files: dict[str, str]) -> str:
        for name, text in files.items():
            (self.repo / name).write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        sha = self.git("rev-parse", "HEAD")
        self.c.say(f"$ git commit -m {shlex.quote(message)}      # {sha[:12]}")
        # What a git host's push webhook does: the reconciler syncs at once instead of at its next poll.
        assert self.local is not None and self.local.reconciler_url
        local_reconciler.notify(
            self.local.reconciler_url, local_reconciler.hook_secret_file(Path(self.local.workdir)), sha
        )
        self.c.say("  (push webhook sent to the reconciler's POST /hook, signed with X-Hub-Signature-256)")
        return sha

    def migsync(self) -> dict[str, Any]:
        group, version, ns, plural, name = MIGSYNC
        try:
            return k8s.CustomObjectsApi(self.api).get_namespaced_custom_object(group, version, ns, plural, name)
        except k8s.exceptions.ApiException:
            return {}

    def nodes(self) -> list[Any]:
        return sorted(self.core.list_node().items, key=lambda n: n.metadata.name)

    def in_sync(self, desired: dict[str, str], config_text: str) -> bool:
        """Every node labelled with its desired config, and its agent reporting success for that content."""
        config = parse_config(config_text)
        for node in self.nodes():
            labels, notes = node.metadata.labels or {}, node.metadata.annotations or {}
            want = desired[node.metadata.name]
            if (
                labels.get(MIG_CONFIG_LABEL) != want
                or labels.get(MIG_CONFIG_STATE_LABEL) != "success"
                or notes.get(APPLIED_ANNOTATION) != want
                or notes.get(DIGEST_ANNOTATION) != config.digest(want)
            ):
                return False
        return True

    def applied_revision(self, sha: str) -> bool:
        return (self.migsync().get("status") or {}).get("lastAppliedRevision") == sha

    # -------------------------------------------------------------------- steps
    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        return [
            ("a local GPU cluster with migops (no GPU, no Docker needed)", self.start),
            ("first sync from git: every node gets its geometry", self.initial_sync),
            ("a commit whose geometry cannot be placed is not applied", self.bad_commit),
            ("kubectl mistakes are denied at admission", self.admission),
            ("a valid change rolls out in waves", self.valid_change),
            ("a GPU changed by hand is put back as git says", self.out_of_band),
            ("MIG workloads: Pods bound to the nodes that advertise their profile", self.workloads),
            ("geometry from demand: `migops suggest` proposes it through git", self.suggest),
            ("summary", self.summary),
        ]

    def start(self) -> None:
        self.c.say("Starting a local GPU cluster: etcd, kube-apiserver, kube-scheduler, the migops webhook,")
        self.c.say("one migops agent per node (simulated GPUs), the migops reconciler on the config repo.")
        cat = catalogue()
        options = stack.Options(
            nodes=3,
            gpus=[cat.resolve(H100), cat.resolve(H100), cat.resolve(A100)],
            gpus_per_node=2,
            strategy="mixed",
            repo=str(self.repo),
            interval="5s",
        )
        started = stack.up(self.home, options, progress=lambda line: self.c.ok(line))
        self.local = started.state
        self.api = _client(self.local.kubeconfig)
        self.c.say(f"  up in {started.seconds:.1f}s; config repo: {self.repo} (git log there shows every commit)")

    def initial_sync(self) -> None:
        head = self.git("rev-parse", "HEAD")
        self.c.say(f"The config repo's first commit ({head[:12]}) assigns all-balanced to every GPU node;")
        self.c.say("maxUnavailable: 1, so the nodes are reconfigured one at a time.")
        desired = {"gpu-node-1": "all-balanced", "gpu-node-2": "all-balanced", "gpu-node-3": "all-balanced"}
        config = (self.repo / "config.yaml").read_text()
        self.c.wait("every node to report success for all-balanced", lambda: self.in_sync(desired, config), 120)
        self.c.wait(f"the MigSync to record revision {head[:12]} as applied", lambda: self.applied_revision(head), 60)
        self.run(["kubectl", "get", "nodes", "-L", f"{MIG_CONFIG_LABEL},{MIG_CONFIG_STATE_LABEL},{GPU_PRODUCT_LABEL}"])
        labels = self.core.read_node("gpu-node-1").metadata.labels
        shown = {k: v for k, v in sorted(labels.items()) if k.startswith((resource_name("3g"), f"{NVIDIA_PREFIX}mig."))}
        self.c.say("GFD's labels on gpu-node-1 (mixed strategy; nvidia.com/mig-3g.40gb.* and nvidia.com/mig.*):")
        for key, value in shown.items():
            self.c.say(f'  "{key}": "{value}"')
        for node in ("gpu-node-1", "gpu-node-3"):
            self.run(
                ["kubectl", "get", "node", node, "-o", "jsonpath={.status.allocatable}"],
                show=f"kubectl get node {node} -o jsonpath='{{.status.allocatable}}'",
            )
        self.c.ok("initial sync: every node success, labels and allocatable MIG resources published")

    def bad_commit(self) -> None:
        before = {n.metadata.name: (n.metadata.labels or {}).get(MIG_CONFIG_LABEL) for n in self.nodes()}
        config = (self.repo / "config.yaml").read_text() + (
            "\n  # 4 x 1g (4 slices) + 2 x 2g (4) + 1 x 3g (4): 12 of the H100's 8 memory slices.\n"
            "  h100-dense:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n"
            '        "1g.10gb": 4\n        "2g.20gb": 2\n        "3g.40gb": 1\n'
        )
        nodes = (
            (self.repo / "nodes.yaml")
            .read_text()
            .replace(
                "matchLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n    config: all-balanced",
                "matchLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n    config: h100-dense",
            )
        )
        sha = self.commit("H100 nodes: pack in more instances", {"config.yaml": config, "nodes.yaml": nodes})
        self.c.wait(
            "the reconciler to judge the commit",
            lambda: (self.migsync().get("status") or {}).get("lastAttemptedRevision") == sha,
            60,
        )
        self.run(["migops", "status"], expect=1)
        status = self.migsync().get("status") or {}
        if not status.get("problems") or status.get("lastAppliedRevision") == sha:
            raise DemoFailed("the bad commit was not reported as refused")
        after = {n.metadata.name: (n.metadata.labels or {}).get(MIG_CONFIG_LABEL) for n in self.nodes()}
        if after != before:
            raise DemoFailed(f"labels changed after a refused commit: {before} -> {after}")
        self.c.ok(
            f"commit {sha[:12]} not applied: the cluster keeps {status.get('lastAppliedRevision', '')[:12]}; "
            "no node, label or GPU was touched"
        )

    def admission(self) -> None:
        bad = self.repo.parent / "bad-mig-configmap.yaml"
        text = (
            (CONFIG_REPO / "config.yaml")
            .read_text()
            .replace('"3g.40gb": 1\n\n  # Inference', '"4g.20gb": 1\n\n  # Inference')
        )
        if "4g.20gb" not in text:
            raise DemoFailed("examples/config-repo/config.yaml changed; the demo's hand edit no longer applies")
        bad.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
                    "data": {"config.yaml": text},
                },
                indent=2,
            )
        )
        self.c.say("A hand edit of the MIG ConfigMap: all-balanced on H100 asks for 4g.20gb, an A100 40GB profile")
        self.c.say("(the mistake in NVIDIA/gpu-operator #262). The webhook refuses it before any node sees it: git")
        self.c.say("owns that ConfigMap while the MigSync manages it, and the content is invalid anyway:")
        done = self.run(
            ["kubectl", "apply", "--server-side", "--force-conflicts", "-f", str(bad)],
            expect=1,
            show=f"kubectl apply --server-side --force-conflicts -f {bad.name}",
        )
        if "denied" not in done.stderr:
            raise DemoFailed("the bad ConfigMap was not denied at admission")
        self.c.say("\nA node labelled with a config the ConfigMap does not have:")
        done = self.run(
            ["kubectl", "label", "node", "gpu-node-1", f"{MIG_CONFIG_LABEL}=all-1g.10gb", "--overwrite"], expect=1
        )
        if "denied" not in done.stderr:
            raise DemoFailed("the label naming a missing config was not denied")
        self.c.ok("both denied at admission, with the reason; nothing reached a node")

    def valid_change(self) -> None:
        self.git("revert", "--no-edit", "HEAD")
        self.c.say("$ git revert --no-edit HEAD")
        nodes = (self.repo / "nodes.yaml").read_text()
        nodes = nodes.replace(
            "NVIDIA-H100-80GB-HBM3}\n    config: all-balanced", "NVIDIA-H100-80GB-HBM3}\n    config: h100-inference"
        )
        nodes = nodes.replace(
            "NVIDIA-A100-SXM4-40GB}\n    config: all-balanced", "NVIDIA-A100-SXM4-40GB}\n    config: a100-training"
        )
        desired = {"gpu-node-1": "h100-inference", "gpu-node-2": "h100-inference", "gpu-node-3": "a100-training"}
        parsed = parse_config((self.repo / "config.yaml").read_text())
        rollout = Rollout(desired, parsed.digest, self.c)
        # Watch every Node change as it happens (labels written by the reconciler, states by the agents).
        with Informer(self.core.list_node, handler=rollout.seen, watch_timeout=60) as informer:
            informer.wait_synced(30)
            sha = self.commit("H100 nodes to inference, A100 nodes to training", {"nodes.yaml": nodes})
            self.c.wait("the rollout (one node at a time)", rollout.finished, 180)
        self.c.wait(f"the MigSync to record revision {sha[:12]} as applied", lambda: self.applied_revision(sha), 60)
        if rollout.busiest > 1:
            raise DemoFailed(f"{rollout.busiest} nodes reconfigured at once; maxUnavailable is 1")
        self.run(["migops", "status", "--nodes"])
        self.c.ok(
            f"rolled out in {rollout.waves} waves, at most {rollout.busiest} node reconfiguring at a time "
            "(maxUnavailable 1); every agent reported success"
        )

    def out_of_band(self) -> None:
        node = "gpu-node-1"
        assert self.local is not None
        gpus = json.loads((local_agents.agent_dir(Path(self.local.workdir), node) / "gpus.json").read_text())["gpus"]
        victim = max(gpus[0]["instances"], key=lambda i: i["start"])
        self.c.say(f"Someone removes a GPU instance on {node} by hand (on a real node: nvidia-smi mig -dci/-dgi). On")
        self.c.say("simulated GPUs the same change is `migops sim`, behind the agent's back:")
        seen: list[tuple[str, dict[str, str]]] = []

        def watch(kind: str, obj: dict[str, Any]) -> None:
            notes = objects.annotations_of(obj)
            if obj["metadata"].get("name") == node and DRIFT_ANNOTATION in notes and not seen:
                alloc = (obj.get("status") or {}).get("allocatable") or {}
                seen.append((notes[DRIFT_ANNOTATION], {k: v for k, v in alloc.items() if k.startswith(NVIDIA_PREFIX)}))

        began = time.monotonic()
        with Informer(self.core.list_node, handler=watch, watch_timeout=60) as informer:
            informer.wait_synced(30)
            self.run(["migops", "sim", "destroy-gi", "--node", node, "--gpu", "0", "--start", str(victim["start"])])
            self.c.wait(
                f"the agent on {node} to notice (it compares every {local_agents.DRIFT_INTERVAL:g}s)", lambda: seen, 30
            )
            detected = time.monotonic() - began
            drift, alloc = seen[0]
            self.c.say(f"  {DRIFT_ANNOTATION}: {drift}")
            self.c.say(f"  allocatable while drifted: {json.dumps(alloc, sort_keys=True)} (what really exists)")

            def repaired() -> bool:
                n = self.core.read_node(node)
                notes, labels = n.metadata.annotations or {}, n.metadata.labels or {}
                return DRIFT_ANNOTATION not in notes and labels.get(MIG_CONFIG_STATE_LABEL) == "success"

            self.c.wait("the repair", repaired, 60)
        took = time.monotonic() - began
        events = self.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
        events = sorted(
            (e for e in events if e.reason in ("MigDriftDetected", "MigDriftRepaired")), key=lambda e: e.event_time
        )
        for e in events[-2:]:
            self.c.say(f"  Event {e.type} {e.reason}: {e.message}")
        self.run(["migops", "sim", "show", "--node", node])
        gpus = json.loads((local_agents.agent_dir(Path(self.local.workdir), node) / "gpus.json").read_text())["gpus"]
        if not any(i["start"] == victim["start"] for i in gpus[0]["instances"]):
            raise DemoFailed("the removed GPU instance was not recreated")
        self.c.ok(
            f"drift seen after {detected:.1f}s, repaired after {took:.1f}s through the same safe flow as an "
            "apply; the GPUs are what git says again"
        )

    def workloads(self) -> None:
        self.core.create_namespace({"metadata": {"name": WORKLOADS}})
        offered: dict[str, int] = {}
        for node in self.nodes():
            for key, value in (node.status.allocatable or {}).items():
                if key.startswith(MIG_RESOURCE_PREFIX):
                    offered[key] = offered.get(key, 0) + int(value)
        pods = {f"cuda-{r.split('mig-')[1].replace('.', '-')}": (r, 1) for r in sorted(offered)}
        pods["cuda-too-big"] = (resource_name("3g.40gb"), offered.get(resource_name("3g.40gb"), 0) + 1)
        self.c.say("The verification workload of NVIDIA's documentation, one Pod per MIG resource the nodes offer")
        self.c.say("(`nvidia-smi -L` in a CUDA container), plus one asking for more 3g.40gb instances than exist:")
        for name, (resource, count) in pods.items():
            self.core.create_namespaced_pod(
                WORKLOADS,
                {
                    "metadata": {"name": name},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "cuda",
                                "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                                "command": ["nvidia-smi", "-L"],
                                "resources": {"limits": {resource: str(count)}},
                            }
                        ],
                    },
                },
            )
            self.c.say(f"  pod {name}: limits {resource}: {count}")

        def placed() -> bool:
            fits = all(self.core.read_namespaced_pod(n, WORKLOADS).spec.node_name for n in pods if n != "cuda-too-big")
            events = self.core.list_namespaced_event(WORKLOADS, field_selector="involvedObject.name=cuda-too-big").items
            return fits and any(e.reason == "FailedScheduling" for e in events)

        self.c.wait("kube-scheduler to place the Pods", placed, 60)
        self.run(
            [
                "kubectl",
                "get",
                "pods",
                "-n",
                WORKLOADS,
                "-o",
                "custom-columns=POD:.metadata.name,NODE:.spec.nodeName,REQUESTS:.spec.containers[0].resources.limits",
            ]
        )
        why = [
            e.message
            for e in self.core.list_namespaced_event(WORKLOADS, field_selector="involvedObject.name=cuda-too-big").items
            if e.reason == "FailedScheduling"
        ][-1]
        self.c.say(f"  cuda-too-big stays Pending: {why}")
        self.c.ok("each Pod is bound to a node whose GPUs hold that profile. No container runs here (there is no")
        self.c.say(
            "    kubelet): the Pods are bound, not executed. On a real cluster, `kubectl logs` of each would show"
        )
        self.c.say("    its MIG device, as in the GPU Operator documentation (docs/workloads.md).")

    def suggest(self) -> None:
        self.core.delete_collection_namespaced_pod(WORKLOADS, grace_period_seconds=0)  # no kubelet to stop them
        self.c.wait("the workload Pods to go", lambda: not self.core.list_namespaced_pod(WORKLOADS).items, 60)
        self.c.say("gpu-node-1 runs a pod on one 1g.10gb instance; two pods wait for 2g.20gb, which no node offers")
        self.c.say("(h100-inference and a100-training have none):")
        before = (self.core.read_node("gpu-node-1").metadata.annotations or {}).get(LAYOUT_ANNOTATION)
        pods = {"inference": (resource_name("1g.10gb"), "gpu-node-1"), "train-a": (resource_name("2g.20gb"), None)}
        pods["train-b"] = (resource_name("2g.20gb"), None)
        for name, (resource, node) in pods.items():
            spec: dict[str, Any] = {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "cuda",
                        "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                        "resources": {"limits": {resource: "1"}},
                    }
                ],
            }
            if node:
                spec["nodeName"] = node
            self.core.create_namespaced_pod(WORKLOADS, {"metadata": {"name": name}, "spec": spec})
            self.c.say(f"  pod {name}: limits {resource}: 1" + (f" (running on {node})" if node else ""))
        identity = {
            "GIT_AUTHOR_NAME": "Platform Team",
            "GIT_AUTHOR_EMAIL": "platform@example.com",
            "GIT_COMMITTER_NAME": "Platform Team",
            "GIT_COMMITTER_EMAIL": "platform@example.com",
        }
        done = self.run(["migops", "suggest", str(self.repo), "--commit", "--branch", "suggest/2g"], env=identity)
        if "gpu-node-1" in done.stdout.split("Served once applied")[0] or "-> all-balanced" not in done.stdout:
            raise DemoFailed("the proposal should move a node without pods to all-balanced, never gpu-node-1")
        self.c.say("A person reviews the branch (its commit message is the text above), then merges it:")
        self.git("merge", "-q", "--ff-only", "suggest/2g")
        sha = self.git("rev-parse", "HEAD")
        self.c.say(f"$ git merge --ff-only suggest/2g      # {sha[:12]}")
        assert self.local is not None and self.local.reconciler_url
        local_reconciler.notify(
            self.local.reconciler_url, local_reconciler.hook_secret_file(Path(self.local.workdir)), sha
        )

        def bound() -> bool:
            # The rollout's end too, not the pods alone: KEEP=1's `migops status` then shows it finished.
            placed = all(self.core.read_namespaced_pod(n, WORKLOADS).spec.node_name for n in ("train-a", "train-b"))
            return placed and self.applied_revision(sha)

        self.c.wait("the reconciler's rollout and kube-scheduler to bind the waiting pods", bound, 180)
        self.run(
            [
                "kubectl",
                "get",
                "pods",
                "-n",
                WORKLOADS,
                "-o",
                "custom-columns=POD:.metadata.name,NODE:.spec.nodeName,REQUESTS:.spec.containers[0].resources.limits",
            ]
        )
        after = (self.core.read_node("gpu-node-1").metadata.annotations or {}).get(LAYOUT_ANNOTATION)
        if after != before:
            raise DemoFailed("gpu-node-1's layout changed: the instance in use was not kept")
        self.c.ok("served through a reviewed commit; gpu-node-1, whose instance is in use, was never touched")

    def summary(self) -> None:
        cat = catalogue()
        rows, pictures = [], []
        revisions = {n["name"]: n.get("revision", "") for n in (self.migsync().get("status") or {}).get("nodes") or ()}
        for node in self.nodes():
            labels, notes = node.metadata.labels or {}, node.metadata.annotations or {}
            layout = json.loads(notes.get(LAYOUT_ANNOTATION, "[]"))
            models = {g.get("device_id") for g in layout}
            gpu = f"{len(layout)} x {', '.join(cat.resolve(d).name for d in sorted(models) if d)}"
            resources = ", ".join(
                f"{k.removeprefix(NVIDIA_PREFIX)}={v}"
                for k, v in sorted((node.status.allocatable or {}).items())
                if k.startswith(NVIDIA_PREFIX)
            )
            rows.append(
                [
                    node.metadata.name,
                    gpu,
                    labels.get(MIG_CONFIG_LABEL, "-"),
                    labels.get(MIG_CONFIG_STATE_LABEL, "-"),
                    (revisions.get(node.metadata.name) or "-")[:12],
                    resources,
                ]
            )
            for g in layout:
                model = cat.resolve(g["device_id"])
                placements = [Placement(i["start"], i["size"], i["profile"]) for i in g.get("instances", ())]
                pictures.append(
                    (
                        f"{node.metadata.name} GPU {g['gpu']}  {model.name}  ({labels.get(MIG_CONFIG_LABEL)})",
                        draw_layout(model, placements, indent="    "),
                    )
                )
        for line in table(rows, ["NODE", "GPUS", "CONFIG", "STATE", "REVISION", "RESOURCES"]):
            self.c.say(f"  {line}")
        for title, lines in pictures:
            self.c.say(f"\n  {title}")
            for line in lines:
                self.c.say(line)


def _client(kubeconfig: str) -> k8s.ApiClient:
    from migops.kube.client import api_client

    return api_client(kubeconfig)


def _prepare_repo(path: Path) -> None:
    shutil.copytree(CONFIG_REPO, path, dirs_exist_ok=True)
    (path / "README.md").unlink(missing_ok=True)
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["commit", "-q", "-m", "MIG config: all-balanced everywhere"],
    ):
        subprocess.run(
            ["git", "-c", "user.name=Platform Team", "-c", "user.email=platform@example.com", "-C", str(path), *args],
            check=True,
            capture_output=True,
        )


def main() -> int:
    console = Console()
    keep = os.environ.get("KEEP") == "1"
    home = state.migops_home()
    with state.locked(home):
        current = state.load(home)
        if current is not None and current.running():
            print(
                f"A local cluster is already up under {home} (`migops local status`). Stop it first with "
                "`migops local down`, or run the demo with another MIGOPS_HOME.",
                file=sys.stderr,
            )
            return 1
        stack.down(home)
    workdir = Path(tempfile.mkdtemp(prefix="migops-demo-"))
    repo = workdir / "config-repo"
    _prepare_repo(repo)
    demo = Demo(console, home, repo)
    failed: str | None = None
    try:
        for number, (title, run) in enumerate(demo.steps()):
            console.step(number, title)
            run()
    except DemoFailed as exc:
        failed = str(exc)
    except BaseException:
        if not keep:
            _teardown(console, home, workdir)
        raise
    elapsed = time.monotonic() - console.began
    if keep:
        _explore(home, repo)
    else:
        _teardown(console, home, workdir)
    if failed:
        print(f"\ndemo FAILED after {elapsed:.0f}s: {failed}", file=sys.stderr)
        return 1
    print(f"\ndemo finished in {elapsed:.0f}s: every step behaved as described.")
    return 0


def _teardown(console: Console, home: Path, workdir: Path) -> None:
    console.say("\nTearing down (KEEP=1 make demo leaves everything running) …")
    with state.locked(home):
        survivors = stack.down(home)
    shutil.rmtree(workdir, ignore_errors=True)
    console.say("  nothing left running" if not survivors else f"  could not stop pids {survivors}")


def explore_commands(home: Path, repo: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(explore, stop): the commands KEEP=1 prints, each with its comment. Each works as printed in a new
    shell (tests/demo runs them so): the first puts this migops and the cluster's kubectl on PATH."""
    migops = shlex.quote(str(Path(sys.executable).parent / "migops"))
    home_env = "" if home == state.default_home() else f"MIGOPS_HOME={shlex.quote(str(home))} "
    explore = [
        (f'eval "$({home_env}{migops} local env)"', "migops and kubectl on PATH, KUBECONFIG for this cluster"),
        (f"kubectl get nodes -L {MIG_CONFIG_LABEL},{MIG_CONFIG_STATE_LABEL}", ""),
        ("migops status --nodes", "the reconciler's view (MigSync migops-system/migops)"),
        (f"kubectl get pods -n {WORKLOADS} -o wide", ""),
        (f"git -C {shlex.quote(str(repo))} log --oneline", "edit, commit: the reconciler polls every 5s"),
        (
            f"kubectl label node gpu-node-3 {MIG_CONFIG_LABEL}=all-balanced --overwrite || true",
            "denied: git owns it (the webhook names the repo and file; migops.io/unmanaged=true takes it out)",
        ),
        ("migops sim show --node gpu-node-2", "the simulated GPUs as they are"),
        (
            "migops sim destroy-gi --node gpu-node-2 --gpu 1 --start 4",
            "by hand (nvidia-smi mig -dgi): the agent repairs it",
        ),
        ("kubectl get events --field-selector involvedObject.name=gpu-node-2", "MigDriftDetected, MigDriftRepaired"),
    ]
    return explore, [("migops local down", "")]


def _explore(home: Path, repo: Path) -> None:
    explore, stop = explore_commands(home, repo)

    def lines(commands: list[tuple[str, str]]) -> str:
        width = max(len(c) for c, _ in commands)
        return "\n".join(f"  {c.ljust(width)}   # {why}" if why else f"  {c}" for c, why in commands)

    print(f"\nLeft running (KEEP=1). Explore:\n{lines(explore)}\nStop everything:\n{lines(stop)}")


if __name__ == "__main__":
    sys.exit(main())
