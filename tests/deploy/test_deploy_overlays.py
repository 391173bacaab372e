"""Every overlay (and gpu-operator with every component) on a real kube-apiserver of its own.

Each overlay gets a fresh control plane (its objects would clash with other tests': cluster-wide RBAC,
an admission policy, and webhook configurations with failurePolicy Fail that point at a Service no
pod serves). The GPU Operator's side is set up as that operator leaves a cluster (its namespace, the
ClusterPolicy CRD and object, RuntimeClass `nvidia`) and the overlay's ClusterPolicy patch applied with
the command its kustomization.yaml gives. Then every rendered object goes through a server-side
dry-run and a real create; each pod template is admitted by Pod Security in its namespace; the RBAC
the overlays narrow is asked with `kubectl auth can-i`. For gpu-operator the components run from the
image's install tree (conftest `image`) with their own service accounts' tokens: the certificate job,
the webhook's container command, the reconciler.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import (
    DEPLOYABLE,
    OVERLAYS,
    ROOT,
    WITH_COMPONENTS,
    Image,
    by_key,
    container_argv,
    kubectl,
    kustomize,
    pod_template,
)
from gitrepo import CONFIG_YAML, GitRepo, nodes_yaml
from kubernetes import client as k8s
from kubernetes.client import ApiClient
from polling import until

from migops.api.migsync import record_name
from migops.local.binaries import locate
from migops.local.cluster import apply_cluster_policy, clusterpolicy_crd, install_clusterpolicy_crd
from migops.local.controlplane import ControlPlane
from migops.local.ports import free_ports
from migops.mig.yamlsafe import load_yaml

NS = "migops-system"
GPU_OPERATOR = ("gpu-operator", "gpu-operator-mig-manager", "gpu-operator-webhook-only", WITH_COMPONENTS)
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


@dataclass
class Installed:
    name: str
    plane: ControlPlane
    api: ApiClient
    docs: list[dict[str, Any]]

    def kubectl(
        self, *args: str, input: str | None = None, kubeconfig: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [str(kubectl()), "--kubeconfig", str(kubeconfig or self.plane.admin_kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check:
            assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
        return out

    def can_i(self, account: str, verb: str, resource: str, namespace: str | None = None) -> bool:
        args = ["auth", "can-i", verb, resource, f"--as=system:serviceaccount:{NS}:{account}"]
        out = self.kubectl(*args, *(["-n", namespace] if namespace else []), check=False)
        assert out.stdout.strip() in ("yes", "no"), out.stderr
        return out.stdout.strip() == "yes"


def _overlay_dir(name: str) -> Path:
    """Where the overlay's ClusterPolicy patch is (an overlay built on another uses that one's)."""
    return OVERLAYS / {WITH_COMPONENTS: "gpu-operator", "gpu-operator-webhook-only": "gpu-operator-mig-manager"}.get(
        name, name
    )


def _mig_configmap_name(name: str) -> str:
    """The one name the overlay's ClusterPolicy patch gives the MIG ConfigMap."""
    if name == "kind":
        return yaml.safe_load((OVERLAYS / "kind" / "cluster-policy.yaml").read_text())["spec"]["migManager"]["config"][
            "name"
        ]
    patch = yaml.safe_load((_overlay_dir(name) / "clusterpolicy-patch.yaml").read_text())
    return patch["spec"]["migManager"]["config"]["name"]


def _apply_prerequisites(inst: Installed) -> None:
    """The cluster as the GPU Operator leaves it, then the overlay's ClusterPolicy patch."""
    if inst.name not in GPU_OPERATOR:
        return
    k8s.CoreV1Api(inst.api).create_namespace({"metadata": {"name": "gpu-operator"}})
    install_clusterpolicy_crd(inst.api)
    apply_cluster_policy(inst.api, "single")
    k8s.NodeV1Api(inst.api).create_runtime_class({"metadata": {"name": "nvidia"}, "handler": "nvidia"})
    inst.kubectl(
        "patch",
        "clusterpolicies.nvidia.com/cluster-policy",
        "--type",
        "merge",
        "--patch-file",
        str(_overlay_dir(inst.name) / "clusterpolicy-patch.yaml"),
    )


def _dry_run_then_create(inst: Installed, docs: list[dict[str, Any]]) -> None:
    if not docs:
        return
    text = yaml.safe_dump_all(docs)
    out = inst.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=text)
    assert out.stdout.count("(server dry run)") == len(docs), out.stdout
    out = inst.kubectl("create", "-f", "-", input=text)
    assert out.stdout.count(" created") == len(docs), out.stdout


@pytest.fixture(scope="module", params=[*DEPLOYABLE, WITH_COMPONENTS])
def installed(request: pytest.FixtureRequest, rendered) -> Iterator[Installed]:
    docs = rendered(request.param)
    with ControlPlane(locate()) as plane, plane.api_client() as api:
        inst = Installed(request.param, plane, api, docs)
        _apply_prerequisites(inst)
        # Namespaces, then CRDs (a dry-run of an object needs its namespace to exist and its kind to be
        # served), then everything else; webhook configurations come last in kustomize's order.
        _dry_run_then_create(inst, [d for d in docs if d["kind"] == "Namespace"])
        crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
        _dry_run_then_create(inst, crds)
        for crd in crds:
            inst.kubectl("wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=60s")
        if inst.name == "kind":  # what docs/kind.md applies once the CRD is established (before the webhook runs)
            inst.kubectl("apply", "--server-side", "-f", str(OVERLAYS / "kind" / "cluster-policy.yaml"))
        _dry_run_then_create(inst, [d for d in docs if d["kind"] not in ("Namespace", "CustomResourceDefinition")])
        yield inst


def test_every_object_exists(installed: Installed) -> None:
    out = installed.kubectl("get", "-f", "-", "-o", "name", input=yaml.safe_dump_all(installed.docs))
    assert len(out.stdout.split()) == len(installed.docs)


def test_fail_closed_webhooks_refuse_what_they_guard_and_nothing_else(installed: Installed) -> None:
    """No webhook pod runs here: the API server cannot call it. Node label and MIG ConfigMap writes are
    refused (failurePolicy Fail); kube-system, migops-system and pods are not held up."""
    core = k8s.CoreV1Api(installed.api)
    core.create_node({"metadata": {"name": "gpu-node-1", "labels": {"nvidia.com/mig.capable": "true"}}})
    with pytest.raises(k8s.exceptions.ApiException) as err:
        core.patch_node("gpu-node-1", {"metadata": {"labels": {"nvidia.com/mig.config": "all-disabled"}}})
    assert "failed calling webhook" in err.value.body and "nodes.validate.migops.io" in err.value.body
    cm = {"metadata": {"name": _mig_configmap_name(installed.name)}, "data": {"config.yaml": CONFIG_YAML}}
    with pytest.raises(k8s.exceptions.ApiException) as err:
        core.create_namespaced_config_map("gpu-operator", cm)
    assert "configmaps.validate.migops.io" in err.value.body
    core.patch_node("gpu-node-1", {"metadata": {"labels": {"pool": "a"}}})  # other labels: no webhook call
    core.create_namespaced_config_map("kube-system", {"metadata": {"name": "x"}, "data": {"config.yaml": "x"}})
    core.create_namespaced_config_map(NS, {"metadata": {"name": "x"}, "data": {"config.yaml": "x"}})
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "mig-user"},
            "spec": {
                "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]
            },
        },
    )
    # The alert on failing calls selects kube-apiserver's metric by these labels: they are real.
    rule = yaml.safe_load((OVERLAYS / "components/monitoring/prometheusrule.yaml").read_text())
    (expr,) = [
        r["expr"] for g in rule["spec"]["groups"] for r in g["rules"] if r["alert"] == "MigopsWebhookCallsFailing"
    ]
    metrics = installed.kubectl("get", "--raw", "/metrics").stdout
    failing = [
        line
        for line in metrics.splitlines()
        if line.startswith("apiserver_admission_webhook_rejection_count{")
        and 'error_type="calling_webhook_error"' in line
        and "migops.io" in line
    ]
    names = {part.split('"')[1] for line in failing for part in line.split(",") if part.startswith("name=")}
    assert names == {"nodes.validate.migops.io", "configmaps.validate.migops.io"}, failing
    pattern = expr.split('name=~"')[1].split('"')[0].replace("\\\\", "\\")
    assert all(re.fullmatch(pattern, n) for n in names)


def test_pod_templates_pass_pod_security_in_their_namespace(installed: Installed) -> None:
    labels = by_key(installed.docs)[("Namespace", None, NS)]["metadata"]["labels"]
    level = labels.get("pod-security.kubernetes.io/enforce")
    assert level == ("privileged" if installed.name in ("gpu-operator", WITH_COMPONENTS) else "restricted")
    for doc in installed.docs:
        template = pod_template(doc)
        if template is None:
            continue
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "spec": template["spec"],
            "metadata": {
                "name": f"check-{doc['metadata']['name']}",
                "namespace": doc["metadata"]["namespace"],
                "labels": template["metadata"].get("labels", {}),
            },
        }
        out = installed.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
        assert out.returncode == 0 and "PodSecurity" not in out.stderr, (
            f"{doc['kind']}/{doc['metadata']['name']}: {out.stderr}"
        )
        if doc["kind"] == "DaemonSet" and level == "privileged":
            # ... and needs the privileged level: `restricted` refuses it.
            strict = f"psa-{uuid.uuid4().hex[:6]}"
            installed.kubectl("create", "namespace", strict)
            installed.kubectl("label", "namespace", strict, "pod-security.kubernetes.io/enforce=restricted")
            pod["metadata"]["namespace"] = strict
            out = installed.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
            assert out.returncode != 0 and "violates PodSecurity" in out.stderr


@pytest.mark.parametrize("installed", GPU_OPERATOR, indirect=True)
def test_rbac_the_overlays_narrow(installed: Installed) -> None:
    """kind keeps the base's RBAC; the GPU Operator overlays narrow it to the MIG ConfigMap's name."""
    cm = _mig_configmap_name(installed.name)
    agent = installed.name in ("gpu-operator", WITH_COMPONENTS)
    reconciler = installed.name != "gpu-operator-webhook-only"
    for account in ("migops-webhook", *(["migops-agent"] if agent else [])):
        for verb in ("get", "list", "watch"):
            assert installed.can_i(account, verb, f"configmaps/{cm}", "gpu-operator"), (account, verb)
        assert not installed.can_i(account, "list", "configmaps", "gpu-operator")  # all of them: no
        assert not installed.can_i(account, "get", "configmaps/default-mig-parted-config", "gpu-operator")
        assert not installed.can_i(account, "get", f"configmaps/{cm}", "kube-system")
        assert not installed.can_i(account, "patch", f"configmaps/{cm}", "gpu-operator")
    assert installed.can_i("migops-webhook", "watch", "nodes")
    assert installed.can_i("migops-reconciler", "patch", f"configmaps/{cm}", "gpu-operator") == reconciler
    assert installed.can_i("migops-reconciler", "create", f"configmaps/{cm}", "gpu-operator") == reconciler
    assert not installed.can_i("migops-reconciler", "get", "configmaps/default-mig-parted-config", "gpu-operator")
    assert not installed.can_i("migops-reconciler", "create", "configmaps", "gpu-operator")
    assert not installed.can_i("migops-reconciler", "get", "secrets", "gpu-operator")
    # No object of a component the overlay leaves out, and no grant to its identity (the webhook's
    # settings may still name the reconciler's identity: the one writer it lets change git-owned labels).
    names = {d["metadata"]["name"] for d in installed.docs} | {
        s["name"] for d in installed.docs for s in d.get("subjects") or ()
    }
    assert any("migops-agent" in n for n in names) == agent
    assert any("migops-reconciler" in n for n in names) == reconciler


# ------------------------------------------------------------------ the components, as deployed (gpu-operator)
def _container(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    (container,) = pod_template(doc)["spec"]["containers"]
    return container


def _manifest_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _replace_flag(argv: list[str], flag: str, value: str) -> list[str]:
    hits = [i for i, a in enumerate(argv) if a.startswith(f"{flag}=")]
    assert len(hits) == 1, f"{flag} is not in {argv}"
    return [*argv[: hits[0]], f"{flag}={value}", *argv[hits[0] + 1 :]]


class Proc:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def stop(self, timeout: float = 30) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)
            raise AssertionError(f"did not stop on SIGTERM: {self.log.read_text()[-3000:]}") from None


def _https(port: int, ca: bytes, path: str, body: dict | None = None) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cadata=ca.decode())
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def _ready_everywhere(port: int, ca: bytes) -> bool:
    """/readyz is 200 on eight new connections in a row: each gunicorn worker watches the cluster on its
    own, and a worker still listing answers 503 (the kernel spreads the connections over them)."""
    return all(_https(port, ca, "/readyz")[0] == 200 for _ in range(8))


def _bundles(api: ApiClient) -> set[str]:
    """The distinct caBundles of every webhook of both configurations."""
    admission = k8s.AdmissionregistrationV1Api(api)
    return {
        hook.client_config.ca_bundle or ""
        for hook in [
            *admission.read_validating_webhook_configuration("migops-webhook").webhooks,
            *admission.read_mutating_webhook_configuration("migops-webhook").webhooks,
        ]
    }


def _published_bundle(api: ApiClient) -> bytes:
    bundles = _bundles(api)
    assert len(bundles) == 1, "every webhook of both configurations carries the same caBundle"
    return base64.b64decode(bundles.pop())


def _served_certificate(port: int) -> bytes:
    pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=10)
    return ssl.PEM_cert_to_DER_cert(pem)


@pytest.mark.parametrize("installed", ["gpu-operator"], indirect=True)
def test_a_fresh_install_needs_no_certificate_step(installed: Installed, image: Image, tmp_path: Path) -> None:
    """The webhook's container command (manifest env), as its service account, on a cluster where no
    certificate job ever ran: it creates the Secret, writes the caBundle and serves a certificate that
    bundle trusts; it serves the mounted Secret once the kubelet has put it there, and follows the
    CronJob's renewal through that mount."""
    core = k8s.CoreV1Api(installed.api)
    assert not [s for s in core.list_namespaced_secret(NS).items if s.metadata.name == "migops-webhook-tls"]
    assert _published_bundle(installed.api) == b""
    webhook = _container(installed.docs, "Deployment", "migops-webhook")
    mount = tmp_path / "mount"  # the optional Secret volume, empty until the kubelet fills it
    (port,) = free_ports(1)
    env = {
        **_manifest_env(webhook),
        "MIGOPS_WEBHOOK_TMP": str(tmp_path),
        "POD_NAMESPACE": NS,
        "MIGOPS_WEBHOOK_TLS_CERT": str(mount / "tls.crt"),
        "MIGOPS_WEBHOOK_TLS_KEY": str(mount / "tls.key"),
        "KUBECONFIG": str(installed.plane.kubeconfig_for_service_account(NS, "migops-webhook")),
    }
    assert env["MIGOPS_WEBHOOK_CERTS"] == "self"
    proc = Proc(
        [*container_argv(webhook, image.dockerfile), "--bind", f"127.0.0.1:{port}"],
        {**image.env, **env},
        image.workdir,
        tmp_path / "webhook.log",
    )
    try:
        # Both configurations written (one apply each: a moment apart).
        until(lambda: "" not in _bundles(installed.api) or proc.popen.poll() is not None, 60, "caBundle")
        bundle = _published_bundle(installed.api)
        until(lambda: _ready_everywhere(port, bundle) or proc.popen.poll() is not None, 90, "webhook ready")
        assert proc.popen.poll() is None, (tmp_path / "webhook.log").read_text()[-3000:]
        secret = {k: base64.b64decode(v) for k, v in core.read_namespaced_secret("migops-webhook-tls", NS).data.items()}
        assert secret["ca.crt"] == bundle
        assert _served_certificate(port) == ssl.PEM_cert_to_DER_cert(secret["tls.crt"].decode())

        # The CronJob renews the CA and the serving certificate (forced, no settle, for the test) ...
        certs = _container(installed.docs, "CronJob", "migops-webhook-certs")
        argv = container_argv(certs, image.dockerfile)
        at = argv.index("--settle")
        argv = [*argv[:at], "--settle", "0", *argv[at + 2 :], "--force"]
        out = image.run(
            argv, env={"KUBECONFIG": str(installed.plane.kubeconfig_for_service_account(NS, "migops-webhook-certs"))}
        )
        assert out.returncode == 0, out.stderr
        renewed = {
            k: base64.b64decode(v) for k, v in core.read_namespaced_secret("migops-webhook-tls", NS).data.items()
        }
        assert renewed["tls.crt"] != secret["tls.crt"] and secret["ca.crt"] in renewed["ca-bundle.crt"]
        # ... and the kubelet puts the renewed Secret into the volume: new connections get it.
        mount.mkdir()
        for key in ("tls.crt", "tls.key"):
            (mount / key).write_bytes(renewed[key])
        assert _served_certificate(port) == ssl.PEM_cert_to_DER_cert(renewed["tls.crt"].decode())
        # Ready through the bundle now published. Polled: each of the two workers has its own watches,
        # and in two full-suite runs one answered 503 here once (not reproduced alone or under CPU load).
        published, deadline = _published_bundle(installed.api), time.monotonic() + 60
        while (answer := _https(port, published, "/readyz"))[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert answer[0] == 200, answer
        assert proc.stop() == 0
        # gunicorn's lines are JSON through migops.logs, and no request is an access-log line.
        lines = [json.loads(line) for line in (tmp_path / "webhook.log").read_text().splitlines() if line.strip()]
        assert any(d["logger"] == "gunicorn.error" for d in lines)
        assert not [d for d in lines if d["logger"] == "gunicorn.access"], "the access log is off"
    finally:
        if proc.popen.poll() is None:
            os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait(10)
        core.delete_namespaced_secret("migops-webhook-tls", NS)  # the next test installs as before


@pytest.mark.parametrize("installed", ["gpu-operator"], indirect=True)
def test_components_run_with_their_own_rbac(installed: Installed, image: Image, tmp_path: Path) -> None:
    """Once, in the gpu-operator overlay (the narrowest RBAC, the agent's ConfigMap grant included)."""
    plane, docs, cm_name = installed.plane, installed.docs, _mig_configmap_name(installed.name)
    procs: list[Proc] = []
    try:
        # 1. The certificate job's command, as its service account: Secret + caBundle.
        certs = _container(docs, "CronJob", "migops-webhook-certs")
        out = image.run(
            container_argv(certs, image.dockerfile),
            env={"KUBECONFIG": str(plane.kubeconfig_for_service_account(NS, "migops-webhook-certs"))},
        )
        assert out.returncode == 0, out.stderr
        secret = k8s.CoreV1Api(installed.api).read_namespaced_secret("migops-webhook-tls", NS).data
        tls = tmp_path / "tls"
        tls.mkdir()
        for key in ("tls.crt", "tls.key", "ca.crt"):
            (tls / key).write_bytes(base64.b64decode(secret[key]))
        admission = k8s.AdmissionregistrationV1Api(installed.api)
        for hook in admission.read_validating_webhook_configuration("migops-webhook").webhooks:
            assert base64.b64decode(hook.client_config.ca_bundle) == (tls / "ca.crt").read_bytes()

        # 2. The webhook's container command (gunicorn config, manifest env), as its service account,
        # with the mounted files the Secret gives; bound to loopback for the test.
        webhook = _container(docs, "Deployment", "migops-webhook")
        (port,) = free_ports(1)
        env = {
            **_manifest_env(webhook),
            "MIGOPS_WEBHOOK_TMP": str(tmp_path),
            "MIGOPS_WEBHOOK_TLS_CERT": str(tls / "tls.crt"),
            "MIGOPS_WEBHOOK_TLS_KEY": str(tls / "tls.key"),
            "KUBECONFIG": str(plane.kubeconfig_for_service_account(NS, "migops-webhook")),
        }
        proc = Proc(
            [*container_argv(webhook, image.dockerfile), "--bind", f"127.0.0.1:{port}"],
            {**image.env, **env},
            image.workdir,
            tmp_path / "webhook.log",
        )
        procs.append(proc)
        ca = (tls / "ca.crt").read_bytes()
        until(lambda: _ready_everywhere(port, ca) or proc.popen.poll() is not None, 90, "webhook ready")
        assert proc.popen.poll() is None, (tmp_path / "webhook.log").read_text()[-3000:]
        bad = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": cm_name, "namespace": "gpu-operator"},
            "data": {
                "config.yaml": "version: v1\nmig-configs:\n  typo:\n    - devices: all\n      mig-enabled: true\n"
                "      mig-devices: {\"1g.9gb\": 1}\n"
            },
        }
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": cm_name,
                "namespace": "gpu-operator",
                "operation": "CREATE",
                "userInfo": {"username": "someone"},
                "object": bad,
                "dryRun": True,
            },
        }
        status, body = _https(port, ca, "/validate", review)
        response = json.loads(body)["response"]
        assert status == 200 and response["allowed"] is False and "1g.9gb" in response["status"]["message"]
        status, body = _https(port, ca, "/metrics")
        assert status == 200 and b'migops_webhook_denials_total{rule="unknown-profile"}' in body
        assert proc.stop() == 0

        # 3. The reconciler's container command, as its service account (the narrowed Role: the MIG
        # ConfigMap by name). No webhook serves this plane's registrations: take them away first.
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            installed.kubectl("delete", kind, "migops-webhook")
        repo = GitRepo(tmp_path / "repo")
        revision = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": nodes_yaml()})
        k8s.CustomObjectsApi(installed.api).create_namespaced_custom_object(
            "migops.io",
            "v1alpha1",
            NS,
            "migsyncs",
            {
                "apiVersion": "migops.io/v1alpha1",
                "kind": "MigSync",
                "metadata": {"name": "migops", "namespace": NS},
                "spec": {"url": repo.url, "ref": "main", "interval": "10s"},
            },
        )
        reconciler = _container(docs, "Deployment", "migops-reconciler")
        (port,) = free_ports(1)
        (tmp_path / "hook").write_text("s3cret")
        argv = container_argv(reconciler, image.dockerfile)
        for flag, value in (
            ("--http-address", f"127.0.0.1:{port}"),
            ("--cache-dir", str(tmp_path / "cache")),
            ("--hook-secret-file", str(tmp_path / "hook")),
        ):
            argv = _replace_flag(argv, flag, value)
        env = {
            **_manifest_env(reconciler),
            "HOME": str(tmp_path),
            "KUBECONFIG": str(plane.kubeconfig_for_service_account(NS, "migops-reconciler")),
        }
        proc = Proc(argv, {**image.env, **env}, image.workdir, tmp_path / "reconciler.log")
        procs.append(proc)
        core = k8s.CoreV1Api(installed.api)

        def written() -> bool:
            try:
                return core.read_namespaced_config_map(cm_name, "gpu-operator").data["config.yaml"] == CONFIG_YAML
            except k8s.exceptions.ApiException:
                return proc.popen.poll() is not None

        until(written, 90, "the reconciler wrote the MIG ConfigMap")
        assert proc.popen.poll() is None, (tmp_path / "reconciler.log").read_text()[-3000:]

        def ready() -> bool:
            status = (
                k8s.CustomObjectsApi(installed.api)
                .get_namespaced_custom_object("migops.io", "v1alpha1", NS, "migsyncs", "migops")
                .get("status", {})
            )
            return (
                any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
                and status.get("lastAppliedRevision") == revision
            )

        until(ready, 90, "MigSync Ready")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            page = response.read().decode()
        assert "migops_leader 1.0" in page and 'migops_reconcile_total{outcome="Applied"}' in page, page[-2000:]
        assert proc.stop() == 0, (tmp_path / "reconciler.log").read_text()[-3000:]
    finally:
        for proc in procs:
            if proc.popen.poll() is None:
                os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(10)
        # Put the registrations back for whatever runs on this plane next.
        hooks = [d for d in docs if d["kind"] in WEBHOOK_KINDS]
        missing = [
            d
            for d in hooks
            if installed.kubectl("get", d["kind"].lower(), d["metadata"]["name"], check=False).returncode != 0
        ]
        if missing:
            installed.kubectl("create", "-f", "-", input=yaml.safe_dump_all(missing))


def test_kind_overlay_ships_the_operator_crd_migops_local_uses() -> None:
    shipped = load_yaml((OVERLAYS / "kind" / "clusterpolicy-crd.yaml").read_text())
    assert shipped == clusterpolicy_crd()


@pytest.mark.parametrize("name", GPU_OPERATOR)
def test_one_mig_configmap_name_everywhere(name: str, rendered) -> None:
    """The ClusterPolicy patch names the MIG ConfigMap; every grant on ConfigMaps names that one, and
    none of them is the operator's own default-mig-parted-config (the operator rewrites or deletes it)."""
    cm = _mig_configmap_name(name)
    assert cm != "default-mig-parted-config"
    record = [record_name("migops")]  # the reconciler's own applied record, in its namespace: not the operator's
    grants = [
        rule
        for d in rendered(name)
        if d["kind"] in ("Role", "ClusterRole")
        for rule in d["rules"]
        if "configmaps" in rule["resources"] and rule.get("resourceNames") != record
    ]
    assert grants and all(rule.get("resourceNames") == [cm] for rule in grants), grants
    for agent in [d for d in rendered(name) if d["kind"] == "DaemonSet"]:
        spec = pod_template(agent)["spec"]
        env = _manifest_env(spec["containers"][0])
        if name == WITH_COMPONENTS:  # nvml-host-library: the host's library, no NVIDIA runtime
            assert "runtimeClassName" not in spec and env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
        else:
            assert spec["runtimeClassName"] == "nvidia"
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"


def test_kind_cluster_config_gives_the_agent_its_nodes(rendered) -> None:
    config = yaml.safe_load((OVERLAYS / "kind" / "kind-cluster.yaml").read_text())
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    (agent,) = [d for d in rendered("kind") if d["kind"] == "DaemonSet"]
    selector = pod_template(agent)["spec"]["nodeSelector"]
    gpu_workers = [
        n for n in config["nodes"] if n["role"] == "worker" and (n.get("labels") or {}).items() >= selector.items()
    ]
    assert len(gpu_workers) == 2 and len(config["nodes"]) == 4
    # The image the kind overlay runs is the one docs/kind.md builds and loads.
    images = {c["image"] for d in rendered("kind") if pod_template(d) for c in pod_template(d)["spec"]["containers"]}
    assert images == {"migops:0.1.0"}
    assert "docker build -t migops:0.1.0 ." in (OVERLAYS.parents[1] / "docs" / "kind.md").read_text()


def test_the_documented_user_overlay_renames_every_image(tmp_path: Path) -> None:
    """docs/deploy-gpu-operator.md's own overlay, as written there, points every container at the registry."""
    doc = (OVERLAYS.parents[1] / "docs" / "deploy-gpu-operator.md").read_text()
    body = doc.split("cat > deploy/prod/kustomization.yaml <<'EOF'\n")[1].split("\nEOF\n")[0]
    shutil.copytree(OVERLAYS.parent, tmp_path / "manifests")
    shutil.copytree(ROOT / "charts" / "migops" / "crds", tmp_path / "charts" / "migops" / "crds")  # they reference it
    (tmp_path / "deploy" / "prod").mkdir(parents=True)
    (tmp_path / "deploy" / "prod" / "kustomization.yaml").write_text(body + "\n")
    docs = kustomize(tmp_path / "deploy" / "prod")
    images = {c["image"] for d in docs if pod_template(d) for c in pod_template(d)["spec"]["containers"]}
    assert images == {"registry.example.com/platform/migops:0.1.0"}


def test_the_cert_manager_component_replaces_migops_own_certificates(rendered) -> None:
    """Render-checked only (cert-manager cannot run here): the Certificate names the Secret the pods
    mount and the SANs the API server dials; its CA injector is pointed at both configurations; the
    pods serve the mounted files and wait for them; migops's CronJob is gone."""
    from deploy_helpers import CERT_MANAGER

    from migops.certs.rotation import service_dns_names

    docs = rendered(CERT_MANAGER)
    kinds = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert ("CronJob", "migops-webhook-certs") not in kinds
    serving = kinds[("Certificate", "migops-webhook")]
    assert serving["metadata"]["namespace"] == NS
    assert set(serving["spec"]["dnsNames"]) == set(service_dns_names("migops-webhook", NS))
    issuer = kinds[("Issuer", serving["spec"]["issuerRef"]["name"])]
    assert kinds[("Certificate", "migops-webhook-ca")]["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]
    for kind in WEBHOOK_KINDS:
        assert (
            kinds[(kind, "migops-webhook")]["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
            == f"{serving['metadata']['namespace']}/{serving['metadata']['name']}"
        )
    deployment = kinds[("Deployment", "migops-webhook")]
    container = _container(docs, "Deployment", "migops-webhook")
    assert _manifest_env(container)["MIGOPS_WEBHOOK_CERTS"] == "mounted"
    (tls,) = [v for v in pod_template(deployment)["spec"]["volumes"] if v["name"] == "tls"]
    assert tls["secret"] == {**tls["secret"], "secretName": serving["spec"]["secretName"], "optional": False}
    # Without the component: the pods issue their own (the volume is optional, the mode `self`).
    base = _container(rendered("gpu-operator"), "Deployment", "migops-webhook")
    assert _manifest_env(base)["MIGOPS_WEBHOOK_CERTS"] == "self"


@pytest.mark.parametrize("name", [*DEPLOYABLE, "local", WITH_COMPONENTS])
def test_every_component_logs_the_same_format(name: str, rendered) -> None:
    """One log format per deployment: an overlay that replaces a component's command (local and kind
    run the agent on simulated GPUs) keeps its --log-format json and --log-level, so a log pipeline
    reads every migops pod the same way."""
    settings: dict[str, tuple[str, str]] = {}
    for doc in rendered(name):
        template = pod_template(doc)
        if not template or doc["kind"] == "CronJob":
            continue
        container = template["spec"]["containers"][0]
        env = _manifest_env(container)
        if "MIGOPS_WEBHOOK_LOG_FORMAT" in env:
            settings[doc["metadata"]["name"]] = (env["MIGOPS_WEBHOOK_LOG_FORMAT"], env["MIGOPS_WEBHOOK_LOG_LEVEL"])
            continue
        argv = " ".join([*container.get("command", []), *container.get("args", [])]).replace("=", " ").split()
        assert "--log-format" in argv and "--log-level" in argv, (doc["metadata"]["name"], argv)
        settings[doc["metadata"]["name"]] = (
            argv[argv.index("--log-format") + 1],
            argv[argv.index("--log-level") + 1],
        )
    assert "migops-webhook" in settings
    assert set(settings.values()) == {("json", "info")}, settings
