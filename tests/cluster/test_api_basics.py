"""The control plane is a real, TLS-secured kube-apiserver at the pinned version."""

from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

APPLY = "application/apply-patch+yaml"
REPO = Path(__file__).resolve().parents[2]


def _pinned(name: str) -> str:
    env = (REPO / "hack" / "k8s-versions.env").read_text()
    return next(line.split("=", 1)[1].strip() for line in env.splitlines() if line.startswith(name + "="))


def test_server_reports_the_pinned_version(admin) -> None:
    info = k8s.VersionApi(admin).get_code()
    assert info.git_version == _pinned("KUBERNETES_VERSION")


def test_admin_kubeconfig_is_self_contained(control_plane) -> None:
    cfg = yaml.load(control_plane.admin_kubeconfig.read_text(), Loader=yaml.CSafeLoader)
    assert cfg["current-context"] == "migops-local"
    cluster = cfg["clusters"][0]["cluster"]
    assert cluster["server"] == control_plane.url
    assert base64.b64decode(cluster["certificate-authority-data"]) == control_plane.ca_pem
    user = cfg["users"][0]["user"]
    assert {"client-certificate-data", "client-key-data"} <= set(user)
    assert control_plane.admin_kubeconfig.stat().st_mode & 0o077 == 0


def test_serving_certificate_is_verified_not_trusted_blindly(control_plane, tmp_path) -> None:
    """TLS is real: a client pinning another CA is refused; the right CA gets through."""
    from migops import certs

    (tmp_path / "other.crt").write_bytes(certs.create_ca("other").cert_pem)
    wrong = ssl.create_default_context(cafile=str(tmp_path / "other.crt"))
    with pytest.raises(urllib.error.URLError) as err:
        urllib.request.urlopen(f"{control_plane.url}/livez", context=wrong, timeout=10)
    assert isinstance(err.value.reason, ssl.SSLCertVerificationError)
    (tmp_path / "ca.crt").write_bytes(control_plane.ca_pem)
    right = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    with urllib.request.urlopen(f"{control_plane.url}/livez", context=right, timeout=10) as resp:
        assert resp.read() == b"ok"


def test_configmap_create_then_update(admin, namespace) -> None:
    core = k8s.CoreV1Api(admin)
    core.create_namespaced_config_map(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "geometry"},
            "data": {"config.yaml": "version: v1\n"},
        },
    )
    first = core.read_namespaced_config_map("geometry", namespace)
    assert first.data == {"config.yaml": "version: v1\n"}

    first.data["config.yaml"] = "version: v1\nmig-configs: {}\n"
    updated = core.replace_namespaced_config_map("geometry", namespace, first)
    assert int(updated.metadata.resource_version) > int(first.metadata.resource_version)
    assert core.read_namespaced_config_map("geometry", namespace).data["config.yaml"].endswith("{}\n")

    # A stale resourceVersion is a real optimistic-concurrency conflict.
    first.data["config.yaml"] = "lost update"
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("geometry", namespace, first)
    assert err.value.status == 409


def test_garbage_to_the_api_is_a_4xx(admin, node) -> None:
    core = k8s.CoreV1Api(admin)
    cases = [
        ("apply without a field manager", 422, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}, {}),
        ("apply without apiVersion", 400, {"kind": "Node", "metadata": {"name": node}}, {"field_manager": "g"}),
        (
            "apply naming another object",
            400,
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "other"}},
            {"field_manager": "g"},
        ),
        ("apply body that is not an object", 400, "labels: [unterminated", {"field_manager": "g"}),
    ]
    for what, status, body, kwargs in cases:
        with pytest.raises(ApiException) as err:
            core.patch_node(node, body, _content_type=APPLY, **kwargs)
        assert err.value.status == status, f"{what}: {err.value.status} {err.value.body}"
    with pytest.raises(ApiException) as err:  # a label value with spaces fails validation
        core.patch_node(
            node,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": {"nvidia.com/mig.config": "no spaces"}},
            },
            field_manager="g",
            _content_type=APPLY,
        )
    assert err.value.status == 422
    assert "nvidia.com/mig.config" not in (core.read_node(node).metadata.labels or {})


def test_apply_body_with_wrong_field_types_is_a_500_upstream_bug(admin, node) -> None:
    """Pinned quirk: kube-apiserver answers 500, not 400, when an apply body does not fit the
    schema ("failed to create typed patch object"; kubernetes/kubernetes #122480, #139253).
    Clients must not treat every 5xx from an apply as transient and retry it forever.
    """
    core = k8s.CoreV1Api(admin)
    with pytest.raises(ApiException) as err:
        core.patch_node(
            node,
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": ["not", "a", "map"]}},
            field_manager="g",
            _content_type=APPLY,
        )
    assert err.value.status == 500
    assert "failed to create typed patch object" in err.value.body
    assert ".metadata.labels: expected map" in err.value.body
