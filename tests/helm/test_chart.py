"""The Helm chart (charts/migops), the one hand-written source of migops's objects: manifests/ is its render
(checked), each component composes onto every mode as the chart renders that mode, values reach the
objects, a schema refuses bad values by name, and the real API server accepts every mode's render."""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, MODES, ROOT, find, run_helm, set_args, template

from migops.local.binaries import locate

KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
HELM_LABELS = (
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
)


# What each render must equal: chart values -> the generated overlay and components composed on it.
OVERLAY = {
    "agent": "gpu-operator",
    "mig-manager": "gpu-operator-mig-manager",
    "webhook-only": "gpu-operator-webhook-only",
}
CASES = [
    *[({"mode": mode}, OVERLAY[mode], ()) for mode in MODES],
    *[({"mode": mode, "certificates.mode": "cert-manager"}, OVERLAY[mode], ("cert-manager",)) for mode in MODES],
    *[({"mode": mode, "monitoring.enabled": True}, OVERLAY[mode], ("monitoring",)) for mode in MODES],
    ({"webhook.networkPolicy.enabled": True}, "gpu-operator", ("webhook-network-policy",)),
    (
        {
            "agent.hostGpuClients.enabled": True,
            "agent.nvmlHostLibrary": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            "reconciler.configRepo.sshSecret": "migops-git-ssh",
        },
        "gpu-operator",
        ("host-driver", "nvml-host-library", "git-ssh"),
    ),
]


def test_manifests_are_the_charts_render(helm: Path) -> None:
    """manifests/ holds exactly what `make generate` renders from the chart and manifests/values/ now: a
    template or value changed without regenerating fails here, naming the files."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MIGOPS_HELM": str(helm)},
        check=False,
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(("values", "overlay", "components"), CASES, ids=lambda v: str(v))
def test_components_compose_as_the_chart_renders(
    helm: Path, tmp_path: Path, values: dict[str, Any], overlay: str, components: tuple[str, ...]
) -> None:
    """A component is generated from what its values change in one mode; composed onto any mode's overlay
    (and with the others), it gives exactly what the chart renders with those values in that mode, field
    for field (the only differences allowed: Helm's labels and its test hook)."""
    rendered = run_helm(
        helm,
        "template",
        "migops",
        str(CHART),
        "-n",
        "migops-system",
        *set_args(values),
        "--set",
        "namespace.create=true",
    ).stdout
    # Through the same YAML reader as the overlay (kustomize's), not PyYAML's: the two read the folded
    # CEL blocks' more-indented lines differently, where Go's reader is the one the API server sees.
    (tmp_path / "chart").mkdir()
    (tmp_path / "chart" / "chart.yaml").write_text(rendered)
    (tmp_path / "chart" / "kustomization.yaml").write_text("resources: [chart.yaml]\n")
    chart = _comparable(_kustomize(tmp_path / "chart"))
    expected = [
        d for d in _kustomize(_overlay(tmp_path, overlay, components)) if d["kind"] != "CustomResourceDefinition"
    ]
    kustomized = _comparable(expected)
    assert sorted(chart) == sorted(kustomized)
    differ = [key for key in kustomized if chart[key] != kustomized[key]]
    assert not differ, "\n".join(_diff(chart[key], kustomized[key], key) for key in differ)


def test_the_crd_is_one_file() -> None:
    """Helm installs crds/ before any template; every manifest references that one file (the kustomization
    beside it, which Helm's .helmignore skips)."""
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == ["kustomization.yaml", "migsyncs.migops.io.yaml"]
    assert "crds/kustomization.yaml" in (CHART / ".helmignore").read_text().splitlines()
    shipped = [p for p in (ROOT / "manifests").rglob("*.yaml") if "CustomResourceDefinition" in p.read_text()]
    assert [p.relative_to(ROOT).as_posix() for p in shipped] == ["manifests/overlays/kind/clusterpolicy-crd.yaml"]


def test_no_template_parses_rendered_yaml() -> None:
    """Templates write objects; none reads YAML back in to rewrite it (the chart carries no files/)."""
    assert not (CHART / "files").exists()
    for path in (CHART / "templates").rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert not any(f in text for f in ("fromYaml", ".Files.", "splitList")), path


def _overlay(tmp_path: Path, overlay: str, components: tuple[str, ...]) -> Path:
    work = tmp_path / "overlay"
    work.mkdir()
    overlays = ROOT / "manifests" / "overlays"
    body = {
        "resources": [os.path.relpath(overlays / overlay, work)],
        "components": [os.path.relpath(overlays / "components" / c, work) for c in components],
    }
    (work / "kustomization.yaml").write_text(yaml.safe_dump(body))
    return work


def _kustomize(directory: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(locate().kubectl), "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _comparable(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    out = {}
    for doc in docs:
        meta = doc["metadata"]
        if "helm.sh/hook" in (meta.get("annotations") or {}):
            continue
        spec = doc.get("spec") or {}
        templates = [spec.get("template"), ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template")]
        for m in [meta, *[t["metadata"] for t in templates if t]]:
            for label in HELM_LABELS:
                (m.get("labels") or {}).pop(label, None)
        out[(doc["kind"], meta.get("namespace", ""), meta["name"])] = doc
    return out


def _diff(chart: dict[str, Any], kustomized: dict[str, Any], key: tuple[str, str, str]) -> str:
    lines = difflib.unified_diff(
        yaml.safe_dump(kustomized, sort_keys=True).splitlines(),
        yaml.safe_dump(chart, sort_keys=True).splitlines(),
        "kustomize",
        "helm template",
        lineterm="",
    )
    return f"{key}:\n" + "\n".join(lines)


def test_helm_lint_strict(helm: Path) -> None:
    for mode in MODES:
        out = run_helm(helm, "lint", "--strict", str(CHART), "--set", f"mode={mode}")
        assert "0 chart(s) failed" in out.stdout, out.stdout


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--set", "mode=operator"], "/mode"),
        (["--set", "webhook.replicas=0"], "/webhook/replicas"),
        (["--set", "webhook.failurePolicy.nodes=Maybe"], "/webhook/failurePolicy/nodes"),
        (["--set", "webhook.timeoutSeconds.pods=60"], "/webhook/timeoutSeconds/pods"),
        (["--set", "image.digest=latest"], "/image/digest"),
        (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (["--set", "gpuOperator.namespace=GPU_Operator"], "/gpuOperator/namespace"),
        (["--set", "reconciler.configRepo.interval=soon"], "/reconciler/configRepo/interval"),
        (["--set", "agent.backend=cuda"], "/agent/backend"),
        (["--set", "webhook.replica=3"], "/webhook"),  # a typo of a key is refused, not ignored
    ],
)
def test_schema_refuses_bad_values_naming_the_field(helm: Path, args: list[str], field: str) -> None:
    out = run_helm(helm, "template", "x", str(CHART), *args, check=False)
    assert out.returncode != 0
    assert "values don't meet the specifications of the schema" in out.stderr
    assert f"at '{field}'" in out.stderr, out.stderr


def test_modes_install_what_their_overlay_holds(helm: Path) -> None:
    kinds = {mode: {(d["kind"], d["metadata"]["name"]) for d in template(helm, {"mode": mode})} for mode in MODES}
    assert ("DaemonSet", "migops-agent") in kinds["agent"]
    assert ("DaemonSet", "migops-agent") not in kinds["mig-manager"]
    assert ("Deployment", "migops-reconciler") in kinds["mig-manager"]
    assert ("Deployment", "migops-reconciler") not in kinds["webhook-only"]
    assert all(("ValidatingWebhookConfiguration", "migops-webhook") in k for k in kinds.values())
    # Helm's release namespace (--create-namespace) unless the chart is asked to own it.
    assert not any(kind == "Namespace" for kind, _ in kinds["agent"])
    owned = template(helm, {"namespace.create": True})
    assert find(owned, "Namespace", "migops-system")["metadata"]["labels"]["migops.io/webhook"] == "skip"


def test_values_reach_the_objects(helm: Path) -> None:
    digest = "sha256:" + "ab" * 32
    docs = template(
        helm,
        {
            "image.repository": "registry.example/migops",
            "image.digest": digest,
            "image.pullPolicy": "Always",
            "webhook.replicas": 3,
            "webhook.priorityClassName": "migops-critical",
            "webhook.failurePolicy.nodes": "Ignore",
            "webhook.timeoutSeconds.configmaps": 9,
            "webhook.resources": {"requests": {"cpu": "250m"}},
            "reconciler.replicas": 1,
            "gpuOperator.namespace": "nvidia-gpu-operator",
            "migConfigMap.name": "site-mig",
            "reconciler.configRepo.url": "ssh://git@git.example/mig.git",
            "reconciler.configRepo.ref": "main",
            "reconciler.configRepo.path": "clusters/a",
            "reconciler.configRepo.sshSecret": "mig-deploy-key",
            "agent.backend": "simulated",
            "agent.simulatedGpus": "2x0x233010DE",
            "logFormat": "text",
            "logLevel": "debug",
        },
        namespace="mig",
    )
    for doc in docs:
        for c in _containers(doc):
            assert c["image"] == f"registry.example/migops@{digest}" and c["imagePullPolicy"] == "Always"
    hook = find(docs, "Deployment", "migops-webhook")
    assert hook["spec"]["replicas"] == 3
    assert hook["spec"]["template"]["spec"]["priorityClassName"] == "migops-critical"
    # Helm merges a value into the defaults: the memory request and limit stay.
    assert hook["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "250m", "memory": "160Mi"},
        "limits": {"memory": "512Mi"},
    }
    validating = find(docs, "ValidatingWebhookConfiguration", "migops-webhook")
    by_name = {h["name"]: h for h in validating["webhooks"]}
    assert by_name["nodes.validate.migops.io"]["failurePolicy"] == "Ignore"
    assert by_name["configmaps.validate.migops.io"]["timeoutSeconds"] == 9
    for h in validating["webhooks"] + find(docs, "MutatingWebhookConfiguration", "migops-webhook")["webhooks"]:
        assert h["clientConfig"]["service"]["namespace"] == "mig"
        names = [e for e in h["namespaceSelector"]["matchExpressions"] if e["key"] == "kubernetes.io/metadata.name"]
        assert "mig" in names[0]["values"]  # never its own release namespace
    cel = " ".join(c["expression"] for c in by_name["configmaps.validate.migops.io"]["matchConditions"])
    assert "'nvidia-gpu-operator'" in cel and "'gpu-operator'" not in cel
    role = find(docs, "Role", "migops-reconciler")
    assert role["metadata"]["namespace"] == "nvidia-gpu-operator"
    assert role["rules"][0]["resourceNames"] == ["site-mig"]
    rec = find(docs, "Deployment", "migops-reconciler")
    assert rec["spec"]["replicas"] == 1
    pod = rec["spec"]["template"]["spec"]
    assert "--namespace=mig" in pod["containers"][0]["args"]
    assert "--ssh-key=/etc/migops/git/identity" in pod["containers"][0]["args"]
    assert {"name": "git-ssh", "secret": {"secretName": "mig-deploy-key", "defaultMode": 288}} in pod["volumes"]
    sync = find(docs, "MigSync", "migops")
    assert sync["spec"] == {
        "url": "ssh://git@git.example/mig.git",
        "ref": "main",
        "path": "clusters/a",
        "interval": "60s",
    }
    agent = find(docs, "DaemonSet", "migops-agent")["spec"]["template"]["spec"]["containers"][0]
    assert agent["command"] == [
        "migops",
        "agent",
        "--backend",
        "simulated",
        "--log-format",
        "text",
        "--log-level",
        "debug",
        "--gpus",
        "2x0x233010DE",
    ]
    assert "--log-format=text" in rec["spec"]["template"]["spec"]["containers"][0]["args"]
    env = {e["name"]: e.get("value") for e in hook["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MIGOPS_WEBHOOK_LOG_FORMAT"] == "text" and env["MIGOPS_WEBHOOK_LOG_LEVEL"] == "debug"
    text = yaml.safe_dump_all(docs)
    for token in ("migops-system", "migops-mig-config", "namespace: gpu-operator"):
        assert token not in text, f"{token!r} left in a render with other names"


def test_cert_manager_mode_is_the_overlay_with_the_cert_manager_component(helm: Path) -> None:
    docs = template(helm, {"certificates.mode": "cert-manager"}, namespace="mig")
    assert not [d for d in docs if d["kind"] == "CronJob"]  # cert-manager renews, migops's CronJob would fight it
    certificates = [d for d in docs if d["kind"] == "Certificate"]
    assert certificates and all(d["metadata"]["namespace"] == "mig" for d in certificates)
    serving = [d for d in certificates if d["spec"].get("secretName") == "migops-webhook-tls"]
    assert serving and "migops-webhook.mig.svc" in serving[0]["spec"]["dnsNames"]
    for kind in KINDS:
        annotations = find(docs, kind, "migops-webhook")["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == "mig/migops-webhook"


def test_network_policy_lets_only_the_api_server_reach_the_webhook(helm: Path) -> None:
    assert not [d for d in template(helm) if d["kind"] == "NetworkPolicy"]
    docs = template(
        helm,
        {"webhook.networkPolicy.enabled": True, "webhook.networkPolicy.apiServerCIDRs": ["10.99.0.1/32"]},
        namespace="mig",
    )
    policy = find(docs, "NetworkPolicy", "migops-webhook")
    assert policy["metadata"]["namespace"] == "mig"
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "migops-webhook"}}
    assert policy["spec"]["ingress"] == [
        {"from": [{"ipBlock": {"cidr": "10.99.0.1/32"}}], "ports": [{"port": 8443, "protocol": "TCP"}]}
    ]


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_renders_objects_the_api_server_accepts(helm: Path, control_plane, mode: str) -> None:
    """Server-side dry-run of the whole render (CRDs and namespaces created for real, nothing else)."""
    kubectl = locate().kubectl
    kube = ["--kubeconfig", str(control_plane.admin_kubeconfig)]
    ns, operator = f"migops-{uuid.uuid4().hex[:6]}", f"gpu-op-{uuid.uuid4().hex[:6]}"
    for name in (ns, operator):
        subprocess.run([str(kubectl), *kube, "create", "namespace", name], check=True, capture_output=True)
    try:
        subprocess.run(
            [str(kubectl), *kube, "apply", "--server-side", "-k", str(CHART / "crds")], check=True, capture_output=True
        )
        docs = template(
            helm,
            {
                "mode": mode,
                "gpuOperator.namespace": operator,
                "reconciler.configRepo.url": "https://git.example/mig.git",
            },
            namespace=ns,
        )
        docs = [d for d in docs if d["kind"] != "Namespace"]
        out = subprocess.run(
            [str(kubectl), *kube, "apply", "--server-side", "--dry-run=server", "-f", "-"],
            input=yaml.safe_dump_all(docs),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.count("(server dry run)") == len(docs), out.stdout
    finally:
        for name in (ns, operator):
            subprocess.run([str(kubectl), *kube, "delete", "namespace", name, "--wait=false"], capture_output=True)


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec") or {}
    pod = (
        (spec.get("template") or {}).get("spec")
        or (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
        or {}
    )
    return list(pod.get("containers") or []) + list(pod.get("initContainers") or [])


def test_no_helm_binary_in_the_repository() -> None:
    assert shutil.which("git")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert not [p for p in tracked if Path(p).name == "helm"]


def test_trust_keys_by_reference_are_mounted_and_required(helm: Path) -> None:
    docs = template(
        helm,
        {
            "reconciler.configRepo.url": "https://git.example/mig.git",
            "reconciler.configRepo.verify.allowedSignersFrom": {"kind": "ConfigMap", "name": "mig-signers"},
            "reconciler.configRepo.verify.trustedKeysFrom": {"kind": "Secret", "name": "mig-gpg", "key": "team.asc"},
        },
    )
    pod = find(docs, "Deployment", "migops-reconciler")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--allowed-signers=/etc/migops/verify-allowed-signers/allowed_signers" in args
    assert "--trusted-key=/etc/migops/verify-trusted-key/team.asc" in args
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["verify-allowed-signers"]["configMap"] == {
        "name": "mig-signers",
        "items": [{"key": "allowed_signers", "path": "allowed_signers"}],
    }
    assert volumes["verify-trusted-key"]["secret"]["secretName"] == "mig-gpg"
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/etc/migops/verify-allowed-signers", "/etc/migops/verify-trusted-key"} <= mounts
    assert "verify" not in find(docs, "MigSync", "migops")["spec"]  # the floor lives in the Deployment


def test_placement_and_pull_secrets_reach_each_components_pods(helm: Path) -> None:
    pin = {"kubernetes.io/hostname": "gpu-1"}
    toleration = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    values: dict[str, Any] = {"imagePullSecrets": [{"name": "registry"}], "image.tag": "1.2.3"}
    for component in ("webhook", "reconciler", "agent"):
        values |= {
            f"{component}.nodeSelector": pin,
            f"{component}.tolerations": toleration,
            f"{component}.priorityClassName": f"{component}-priority",
        }
    docs = template(helm, values)
    for kind, name in [
        ("Deployment", "migops-webhook"),
        ("Deployment", "migops-reconciler"),
        ("DaemonSet", "migops-agent"),
    ]:
        pod = find(docs, kind, name)["spec"]["template"]["spec"]
        component = name.removeprefix("migops-")
        assert pod["priorityClassName"] == f"{component}-priority"
        assert pod["tolerations"] == toleration and pod["imagePullSecrets"] == [{"name": "registry"}]
        # Helm merges maps: the agent keeps its default nvidia.com/mig.capable selector beside the new key.
        assert pod["nodeSelector"].items() >= pin.items()
        assert pod["containers"][0]["image"] == "migops:1.2.3"
    cron = find(docs, "CronJob", "migops-webhook-certs")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert cron["imagePullSecrets"] == [{"name": "registry"}]
