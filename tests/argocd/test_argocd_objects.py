"""The objects migops.local.argocd writes for Argo CD, without a cluster: what `up --argocd`, the Argo CD
tests and docs/gitops-tools.md show must stay what they say."""

from __future__ import annotations

import pytest
import yaml

from migops.local import argocd


def test_an_application_states_server_side_diff_and_never_prunes() -> None:
    app = argocd.application("a", "http://127.0.0.1:1/r.git", "mig-config")
    # v3.6 turns Server-Side Diff on with ServerSideApply=true and caches a denied one as "no diff".
    assert app["metadata"]["annotations"] == {"argocd.argoproj.io/compare-options": "ServerSideDiff=false"}
    spec = app["spec"]
    assert spec["destination"] == {"name": argocd.IN_CLUSTER}
    assert spec["syncPolicy"]["automated"] == {"prune": False, "selfHeal": True}
    assert spec["syncPolicy"]["syncOptions"] == ["ServerSideApply=true"]
    assert spec["syncPolicy"]["retry"]["limit"] == 1
    manual = argocd.application("b", "u", "p", automated=False, server_side_diff=True)
    assert "automated" not in manual["spec"]["syncPolicy"]
    assert manual["metadata"]["annotations"]["argocd.argoproj.io/compare-options"] == "ServerSideDiff=true"


@pytest.mark.parametrize(
    "text",
    [
        "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n\n      mig-enabled: false\n",
        "version: v1\nmig-configs: {}\n  # trailing space \n",  # not a block scalar: still the same text
        "no newline at the end",
    ],
)
def test_the_configmap_in_git_round_trips_the_config_text(text: str) -> None:
    manifest = argocd.configmap_manifest("gpu-operator", "cm", text, wave=-1)
    body = yaml.safe_load(manifest)
    assert body["data"]["config.yaml"] == text
    assert body["metadata"] == {
        "name": "cm",
        "namespace": "gpu-operator",
        "annotations": {"argocd.argoproj.io/sync-wave": "-1"},
    }


def test_a_readable_config_is_a_literal_block() -> None:
    manifest = argocd.configmap_manifest("ns", "cm", "version: v1\nmig-configs: {}\n")
    assert "  config.yaml: |\n    version: v1\n    mig-configs: {}\n" in manifest


def test_a_node_manifest_is_one_label_never_pruned_or_deleted() -> None:
    body = yaml.safe_load(argocd.node_manifest("gpu-node-1", "all-1g.10gb", wave=0))
    assert body["metadata"]["labels"] == {"nvidia.com/mig.config": "all-1g.10gb"}
    assert body["metadata"]["annotations"] == {
        "argocd.argoproj.io/sync-options": "ServerSideApply=true,Validate=false,Prune=false,Delete=false",
        "argocd.argoproj.io/sync-wave": "0",
    }


def test_settings_are_selected_by_argo_cd_and_carry_the_migsync_health_check() -> None:
    objs = argocd.settings(secret_key="k")
    assert [o["metadata"]["name"] for o in objs] == [
        "argocd-cm",
        "argocd-rbac-cm",
        "argocd-cmd-params-cm",
        "argocd-secret",
    ]
    assert all(o["metadata"]["labels"] == {"app.kubernetes.io/part-of": "argocd"} for o in objs)
    lua = objs[0]["data"][argocd.HEALTH_KEY]
    assert lua == argocd.health_lua()
    for status in ('"Degraded"', '"Healthy"', '"Progressing"', '"Stalled"', "summary.failed"):
        assert status in lua
