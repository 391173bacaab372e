"""migops as its users deploy it: the product image, manifests/overlays/local, every part in pods.

One deployment for the module (`deployed`), on the session's real node: the image is built from the
repository's Dockerfile (`migops local image`'s code: a Debian base, a dockerd of our own, no registry)
and imported into migops-node's containerd; the cluster is seeded as `migops local up` seeds it (the
GPU Operator's ClusterPolicy, strategy mixed, and the MIG ConfigMap; migops-node labelled with two
simulated H100s); `migops local deploy`'s code applies the overlay with a config repo mounted into
the reconciler. Tests that disturb pods (a webhook pod deleted, the reconciler restarted) come after
the ones that watch them stay Ready. The module's teardown is `kubectl delete -k` of the overlay and
asserts nothing of it remains.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from gitrepo import CONFIG_YAML, GitRepo, nodes_yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from polling import until

from migops.local import agents, cluster, deploy, image
from migops.local.process import find_by_argument
from migops.mig.catalogue import catalogue

NS = deploy.NAMESPACE
OVERLAY = deploy.OVERLAYS / "local"
GPU = "0x233010DE"  # H100 SXM5 80GB: 7 x 1g.10gb, 2 x 3g.40gb per GPU
GPUS = 2
CLIENT_LABEL = "nvidia.com/gpu.deploy.client"  # a third-party GPU client the agent pauses (agent.kube)
BAD_CONFIG = 'version: v1\nmig-configs:\n  typo:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {"1g.9gb": 1}\n'


@dataclass
class Deployed:
    real_node: object
    built: image.Built
    repo: GitRepo
    seconds: float
    available_at: float  # time.monotonic() when every workload was Available

    @property
    def api(self) -> k8s.ApiClient:
        return self.real_node.admin  # type: ignore[attr-defined]

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.real_node.kubectl), f"--kubeconfig={self.real_node.kubeconfig}", *args],  # type: ignore[attr-defined]
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check:
            assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
        return proc

    def pods(self, name: str | None = None) -> list[k8s.V1Pod]:
        """The pods of the workloads (all, or one by name). Not a Job's: the certificate CronJob starts
        one at minute 17 of every sixth hour, whichever test is running then."""
        selector = f"app.kubernetes.io/name={name}" if name else "app.kubernetes.io/part-of=migops"
        pods = k8s.CoreV1Api(self.api).list_namespaced_pod(NS, label_selector=selector).items
        return [p for p in pods if not any(o.kind == "Job" for o in p.metadata.owner_references or ())]


def _node(deployed: Deployed) -> k8s.V1Node:
    return k8s.CoreV1Api(deployed.api).read_node(deployed.real_node.name)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def deployed(real_node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    built = image.build()
    real_node.load_image(built.archive)
    api = real_node.admin
    cluster.seed(api, [], "mixed")
    cluster.apply_real_node(api, cluster.plan_node(real_node.name, catalogue().resolve(GPU), GPUS, "mixed"))
    agents.seed_mig_config(api)
    repo = GitRepo(tmp_path_factory.mktemp("deploy") / "repo")
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": nodes_yaml(default="all-disabled")})
    seconds = deploy.deploy(
        api, real_node.kubectl, real_node.kubeconfig, overlay=OVERLAY, gpus=f"{GPUS}x{GPU}", repo=repo.url, timeout=300
    )
    print(f"overlay local Available after {seconds:.1f}s")
    result = Deployed(real_node, built, repo, seconds, time.monotonic())
    yield result
    # As docs/deploy-gpu-operator.md says: the MigSyncs first, while the reconciler runs (its finalizer
    # releases their nodes), then the overlay.
    result.kubectl("delete", "migsync", "--all", "-A", "--wait", "--timeout=120s", timeout=180)
    result.kubectl("delete", "-k", str(OVERLAY), "--wait", "--timeout=180s", timeout=240)
    left = result.kubectl(
        "get",
        "clusterroles,clusterrolebindings,validatingwebhookconfigurations,"
        "mutatingwebhookconfigurations,validatingadmissionpolicies,"
        "validatingadmissionpolicybindings,crd",
        "-l",
        "app.kubernetes.io/part-of=migops",
        "-o",
        "name",
    ).stdout.split()
    assert left == [], f"kubectl delete -k left {left}"
    gone = result.kubectl("get", "namespace", NS, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


# ----------------------------------------------------------------------------------------- the image
def test_the_image_is_built_from_the_dockerfile_and_loaded(deployed: Deployed) -> None:
    built = deployed.built
    assert built.reference == image.reference() == f"migops:{image.version()}"
    assert deploy.image_loaded(deployed.real_node.node, built.reference)  # type: ignore[attr-defined]
    with tarfile.open(built.archive) as tar:
        (manifest,) = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(tar.extractfile(manifest["Config"]))["config"]  # type: ignore[arg-type]
    assert manifest["RepoTags"] == [f"{built.reference}"]
    assert config["User"] == "65532:65532" and config["Entrypoint"] == ["migops"]
    assert config["Labels"]["org.opencontainers.image.title"] == "migops"
    # The builder is gone with nothing left: no dockerd of ours, no mount under the cache.
    assert not find_by_argument(f"--data-root={image.cache_dir() / 'docker' / 'data'}")
    assert str(image.cache_dir()) not in Path("/proc/self/mountinfo").read_text()
    print(
        f"image {built.reference}: {built.size / 2**20:.0f} MiB, build {built.build_seconds:.1f}s "
        f"(base rootfs {built.base_seconds:.1f}s)"
    )


# ----------------------------------------------------------------------------------------- the pods
def test_every_pod_is_ready_non_root_read_only_and_stays_ready(deployed: Deployed) -> None:
    pods = deployed.pods()
    names = sorted(p.metadata.labels["app.kubernetes.io/name"] for p in pods)
    assert names == ["migops-agent", "migops-reconciler", "migops-reconciler", "migops-webhook", "migops-webhook"]
    for pod in pods:
        assert pod.spec.node_name == deployed.real_node.name  # type: ignore[attr-defined]
        (container,) = pod.spec.containers
        assert container.security_context.read_only_root_filesystem is True
        assert container.image_pull_policy == "Never"
        # What the process really is, inside the container: uid, and / not writable.
        probe = deployed.kubectl(
            "exec",
            "-n",
            NS,
            pod.metadata.name,
            "--",
            "python",
            "-c",
            "import os\ntry:\n open('/probe','w')\n print(os.getuid(), 'writable')\n"
            "except OSError as e:\n print(os.getuid(), e.strerror)",
        )
        uid, _, outcome = probe.stdout.strip().partition(" ")
        assert uid == "65532" and outcome == "Read-only file system", (pod.metadata.name, probe.stdout)
    # Ready with no restart, for a minute from the moment every workload was Available. Slow on purpose
    # (about 60 s, most of it this wait): a crash loop or a failing probe shows within a minute; less would
    # pass a pod that dies on its first liveness period.
    first = {p.metadata.name for p in pods}
    while True:
        now = deployed.pods()
        assert {p.metadata.name for p in now} == first, "a pod was replaced"
        for pod in now:
            (status,) = pod.status.container_statuses
            assert status.ready and status.restart_count == 0, (pod.metadata.name, status)
        if time.monotonic() - deployed.available_at >= 60:
            break
        time.sleep(5)


# ----------------------------------------------------------------------------------------- the webhook
def _mig_configmap(text: str, **labels: str) -> str:
    meta: dict = {"name": "default-mig-parted-config", "namespace": "gpu-operator"}
    if labels:
        meta["labels"] = labels
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"config.yaml": text}})


# The MigSync owns the ConfigMap's content: a person's edit is judged on its content with the escape hatch.
HATCH = {"migops.io/unmanaged": "true"}


def test_a_bad_mig_configmap_is_denied_through_the_service(deployed: Deployed) -> None:
    admission = k8s.AdmissionregistrationV1Api(deployed.api)
    for hook in admission.read_validating_webhook_configuration("migops-webhook").webhooks:
        assert hook.client_config.url is None and hook.client_config.service.name == "migops-webhook"
        assert hook.client_config.ca_bundle, "the webhook published its own CA: no manual step"
    for dry_run in ("--dry-run=server", None):
        out = deployed.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            *([dry_run] if dry_run else []),
            "-f",
            "-",
            input=_mig_configmap(BAD_CONFIG, **HATCH),
            check=False,
        )
        assert out.returncode != 0 and "denied the request" in out.stderr and "1g.9gb" in out.stderr, out.stderr
        assert "[unknown-profile]" in out.stderr
    # --force-conflicts: past the API server's field-ownership check (the reconciler owns config.yaml), to
    # the webhook, as a user who insists would go.
    out = deployed.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "-f",
        "-",
        input=_mig_configmap(BAD_CONFIG),
        check=False,
    )
    assert out.returncode != 0 and "[git-owned]" in out.stderr and f"MigSync {NS}/{deploy.MIGSYNC}" in out.stderr
    out = deployed.kubectl(
        "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-", input=_mig_configmap(CONFIG_YAML)
    )
    assert "serverside-applied (server dry run)" in out.stdout


# ----------------------------------------------------------------------------------------- GitOps to GPUs
def _assign(deployed: Deployed, config: str) -> str:
    name = deployed.real_node.name  # type: ignore[attr-defined]
    return deployed.repo.commit(
        {"nodes.yaml": nodes_yaml(f"  - nodes: [{name}]\n    config: {config}", default="all-disabled")},
        f"{name}: {config}",
    )


def _applied(deployed: Deployed, config: str, resource: str, count: int) -> bool:
    node = _node(deployed)
    labels = node.metadata.labels or {}
    return (
        labels.get("nvidia.com/mig.config") == config
        and labels.get("nvidia.com/mig.config.state") == "success"
        and (node.status.allocatable or {}).get(resource) == str(count)
    )


def test_a_commit_reaches_the_gpus_through_the_pods(deployed: Deployed) -> None:
    _assign(deployed, "all-1g.10gb")
    until(
        lambda: _applied(deployed, "all-1g.10gb", "nvidia.com/mig-1g.10gb", 7 * GPUS),
        180,
        "all-1g.10gb applied by the agent pod, allocatable 14 x 1g.10gb",
    )
    (agent,) = deployed.pods("migops-agent")
    log = deployed.kubectl("logs", "-n", NS, agent.metadata.name).stdout
    assert "all-1g.10gb" in log, log[-2000:]


def test_a_mig_pod_runs_and_a_reconfiguration_waits_for_it(deployed: Deployed) -> None:
    """A GPU client (a DaemonSet on nvidia.com/gpu.deploy.client, as the agent pauses them) holding a
    1g.10gb: it runs for real; a new config waits until the kubelet has stopped it (SIGTERM, graceful)."""
    if not _applied(deployed, "all-1g.10gb", "nvidia.com/mig-1g.10gb", 7 * GPUS):
        _assign(deployed, "all-1g.10gb")
        until(lambda: _applied(deployed, "all-1g.10gb", "nvidia.com/mig-1g.10gb", 7 * GPUS), 180, "all-1g.10gb")
    core, apps = k8s.CoreV1Api(deployed.api), k8s.AppsV1Api(deployed.api)
    node = deployed.real_node.name  # type: ignore[attr-defined]
    core.patch_node(node, {"metadata": {"labels": {CLIENT_LABEL: "true"}}})
    ns = f"mig-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    until(lambda: core.list_namespaced_service_account(ns).items, 30, "default ServiceAccount")
    script = (
        "import signal, sys, time\nprint('started', flush=True)\n"
        "def bye(*_):\n    print('SIGTERM: stopping', flush=True); time.sleep(3); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\nwhile True: time.sleep(1)\n"
    )
    labels = {"app": "mig-client"}
    spec = {
        "nodeSelector": {CLIENT_LABEL: "true"},
        "terminationGracePeriodSeconds": 20,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
        "containers": [
            {
                "name": "main",
                "image": deployed.built.reference,
                "imagePullPolicy": "Never",
                "command": ["python", "-c", script],
                "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}},
                "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
            }
        ],
    }
    try:
        apps.create_namespaced_daemon_set(
            ns,
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "mig-client"},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": spec},
                },
            },
        )

        def running() -> k8s.V1Pod | None:
            for pod in core.list_namespaced_pod(ns).items:
                if (
                    pod.status.phase == "Running"
                    and pod.spec.node_name == node
                    and "started" in deployed.kubectl("logs", "-n", ns, pod.metadata.name, check=False).stdout
                ):
                    return pod
            return None

        pod = until(running, 120, "the MIG client running on the real node")
        first = pod.metadata.name
        _assign(deployed, "all-3g.40gb")

        # The agent pauses the client; the DaemonSet controller deletes its pod (gracefully); the kubelet
        # sends SIGTERM and the container takes 3 s to stop. Nothing is applied meanwhile.
        def terminating() -> bool:
            try:
                p = core.read_namespaced_pod(first, ns)
            except ApiException as exc:
                assert exc.status != 404, "the pod vanished without being seen terminating"
                raise
            return (
                p.metadata.deletion_timestamp is not None
                and "SIGTERM" in deployed.kubectl("logs", "-n", ns, first, check=False).stdout
            )

        until(terminating, 120, "the client pod terminating after SIGTERM")
        labels_now = _node(deployed).metadata.labels
        assert (
            labels_now.get("nvidia.com/mig.config.state") != "success"
            or labels_now.get("nvidia.com/mig.config") != "all-3g.40gb"
        )
        assert labels_now.get(CLIENT_LABEL) != "true", "the agent paused the client"
        assert _node(deployed).status.allocatable.get("nvidia.com/mig-3g.40gb") in (None, "0")

        def gone() -> bool:
            try:
                core.read_namespaced_pod(first, ns)
                return False
            except ApiException as exc:
                return exc.status == 404

        until(gone, 60, "the client pod gone (no --force)")
        until(lambda: _applied(deployed, "all-3g.40gb", "nvidia.com/mig-3g.40gb", 2 * GPUS), 180, "all-3g.40gb")
        until(lambda: _node(deployed).metadata.labels.get(CLIENT_LABEL) == "true", 60, "the client resumed")
    finally:
        core.delete_namespace(ns)
        core.patch_node(node, {"metadata": {"labels": {CLIENT_LABEL: None}}})


# ----------------------------------------------------------------------------------------- disruptions
def test_deleting_a_webhook_pod_drops_no_admission_request(deployed: Deployed) -> None:
    core = k8s.CoreV1Api(deployed.api)
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator", "labels": HATCH},
        "data": {"config.yaml": CONFIG_YAML + "# a changed comment: the webhook is asked\n"},
    }
    results: list[str] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            try:  # reaches the webhook (the MIG ConfigMap's content), writes nothing
                core.replace_namespaced_config_map(
                    "default-mig-parted-config", "gpu-operator", body, dry_run="All", _request_timeout=15
                )
                results.append("ok")
            except ApiException as exc:
                results.append(f"{exc.status}: {exc.body[:300] if exc.body else exc.reason}")
            time.sleep(0.05)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        time.sleep(2)
        victim = deployed.pods("migops-webhook")[0].metadata.name
        deployed.kubectl("delete", "pod", "-n", NS, victim, "--wait=true", timeout=120)
        until(
            lambda: (
                not deploy.unavailable(deployed.api, [{"kind": "Deployment", "metadata": {"name": "migops-webhook"}}])
            ),
            120,
            "two webhook replicas again",
        )
        time.sleep(2)
    finally:
        stop.set()
        thread.join(30)
    failures = [r for r in results if r != "ok"]
    assert len(results) > 50 and failures == [], (len(results), failures[:5])
    print(f"{len(results)} admission requests across the webhook pod's restart, none failed")


def test_restarting_the_reconciler_hands_leadership_over(deployed: Deployed) -> None:
    from migops.reconciler.main import lease_name

    coordination = k8s.CoordinationV1Api(deployed.api)

    def holder() -> str:
        return coordination.read_namespaced_lease(lease_name(deploy.MIGSYNC), NS).spec.holder_identity or ""

    before = until(holder, 60, "a leader")
    old_pods = {p.metadata.name for p in deployed.pods("migops-reconciler")}
    assert any(before.startswith(p) for p in old_pods), (before, old_pods)
    deployed.kubectl("rollout", "restart", "deployment/migops-reconciler", "-n", NS)
    deployed.kubectl("rollout", "status", "deployment/migops-reconciler", "-n", NS, "--timeout=180s", timeout=200)
    new_pods = {p.metadata.name for p in deployed.pods("migops-reconciler") if p.metadata.deletion_timestamp is None}
    assert not new_pods & old_pods
    until(lambda: any(holder().startswith(p) for p in new_pods), 120, "a new pod holding the lease")
    # The new leader reconciles: a commit made now reaches the node.
    _assign(deployed, "all-1g.10gb")
    until(
        lambda: _applied(deployed, "all-1g.10gb", "nvidia.com/mig-1g.10gb", 7 * GPUS),
        180,
        "a commit after the hand-over applied",
    )


def test_the_agent_pod_has_its_own_identity_and_only_its_node(deployed: Deployed) -> None:
    core = k8s.CoreV1Api(deployed.api)
    other = f"other-{uuid.uuid4().hex[:6]}"
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": other}})
    try:
        (agent,) = deployed.pods("migops-agent")
        assert agent.spec.service_account_name == "migops-agent"
        script = f"""
import json
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
config.load_incluster_config()
api = client.ApiClient()
review = client.AuthenticationV1Api(api).create_self_subject_review({{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}})
out = {{"user": review.status.user_info.username, "extra": review.status.user_info.extra}}
core = client.CoreV1Api(api)
for name in ({deployed.real_node.name!r}, {other!r}):
    try:
        core.patch_node(name, {{"metadata": {{"labels": {{"nvidia.com/gpu.deploy.nvsm": "false"}}}}}})
        out[name] = "allowed"
    except ApiException as exc:
        out[name] = f"{{exc.status}} {{json.loads(exc.body)['message']}}"
print(json.dumps(out))
"""
        out = deployed.kubectl("exec", "-n", NS, agent.metadata.name, "--", "python", "-c", script)
        seen = json.loads(out.stdout.strip().splitlines()[-1])
        assert seen["user"] == "system:serviceaccount:migops-system:migops-agent"
        assert seen["extra"]["authentication.kubernetes.io/node-name"] == [deployed.real_node.name]  # type: ignore[attr-defined]
        assert seen["extra"]["authentication.kubernetes.io/pod-name"] == [agent.metadata.name]
        assert seen[deployed.real_node.name] == "allowed"  # type: ignore[attr-defined]
        assert (
            seen[other].startswith(("403", "422")) and f"only its own node {deployed.real_node.name}" in seen[other]
        ), seen  # type: ignore[attr-defined]
    finally:
        core.delete_node(other)
        core.patch_node(deployed.real_node.name, {"metadata": {"labels": {"nvidia.com/gpu.deploy.nvsm": None}}})  # type: ignore[attr-defined]
