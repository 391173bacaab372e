"""RBAC is really enforced: identities without a grant get a 403 from the API server."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException


def _grant_configmap_reader(admin, namespace: str, subject: dict) -> None:
    rbac = k8s.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(
        namespace,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "configmap-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "configmap-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
            "subjects": [subject],
        },
    )


def _eventually_allowed(call, timeout: float = 10.0):
    """RBAC changes reach the authorizer through an informer: allow a moment to propagate."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except ApiException as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_user_without_permission_gets_403_until_granted(admin, namespace, kubeconfig_for, client_for) -> None:
    user = k8s.CoreV1Api(client_for(kubeconfig_for("alice", ["migops:testers"])))
    with pytest.raises(ApiException) as err:
        user.list_namespaced_config_map(namespace)
    assert err.value.status == 403
    status = json.loads(err.value.body)
    assert status["reason"] == "Forbidden"
    assert 'User "alice" cannot list resource "configmaps"' in status["message"]

    _grant_configmap_reader(
        admin, namespace, {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}
    )
    assert _eventually_allowed(lambda: user.list_namespaced_config_map(namespace)).items == []

    # The grant is exactly as wide as the Role: no writes, nothing cluster-wide.
    with pytest.raises(ApiException) as err:
        user.create_namespaced_config_map(namespace, {"metadata": {"name": "nope"}})
    assert err.value.status == 403
    with pytest.raises(ApiException) as err:
        user.list_node()
    assert err.value.status == 403


def test_group_membership_comes_from_the_certificate(admin, namespace, kubeconfig_for, client_for) -> None:
    _grant_configmap_reader(
        admin, namespace, {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "migops:gitops"}
    )
    member = k8s.CoreV1Api(client_for(kubeconfig_for("bob", ["migops:gitops"])))
    outsider = k8s.CoreV1Api(client_for(kubeconfig_for("carol", ["migops:other"])))
    assert _eventually_allowed(lambda: member.list_namespaced_config_map(namespace)).items == []
    with pytest.raises(ApiException) as err:
        outsider.list_namespaced_config_map(namespace)
    assert err.value.status == 403

    review = k8s.AuthenticationV1Api(client_for(kubeconfig_for("bob", ["migops:gitops"]))).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    assert review.status.user_info.username == "bob"
    assert "migops:gitops" in review.status.user_info.groups


def test_service_account_token_is_real_and_rbac_bound(admin, namespace, service_account_kubeconfig, client_for) -> None:
    api = client_for(service_account_kubeconfig(namespace, "mig-reconciler"))
    review = k8s.AuthenticationV1Api(api).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    assert review.status.user_info.username == f"system:serviceaccount:{namespace}:mig-reconciler"
    assert f"system:serviceaccounts:{namespace}" in review.status.user_info.groups

    sa = k8s.CoreV1Api(api)
    with pytest.raises(ApiException) as err:
        sa.list_namespaced_config_map(namespace)
    assert err.value.status == 403

    _grant_configmap_reader(
        admin, namespace, {"kind": "ServiceAccount", "name": "mig-reconciler", "namespace": namespace}
    )
    assert _eventually_allowed(lambda: sa.list_namespaced_config_map(namespace)).items == []


def test_a_forged_token_is_rejected(control_plane, client_for, tmp_path) -> None:
    from migops.local import kubeconfig

    path = kubeconfig.write(
        tmp_path / "forged.kubeconfig",
        kubeconfig.build(control_plane.url, control_plane.ca_pem, "mallory", token="not-a-token"),
    )
    with pytest.raises(ApiException) as err:
        k8s.CoreV1Api(client_for(path)).list_namespace()
    assert err.value.status == 401
