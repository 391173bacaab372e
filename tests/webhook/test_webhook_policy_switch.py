"""A ClusterPolicy switching to another MIG ConfigMap (spec.migManager.config.name) is
judged like a change of the ConfigMap in force, through the real API server: the target must exist,
parse and serve every node's nvidia.com/mig.config under the strategy; denied with the reason by
`kubectl patch` (also --dry-run=server) and the Python client; a good switch is admitted and the
webhook then judges Node labels against the new ConfigMap."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from webhook_helpers import MANAGER, configmap, eventually

from migops.kube import ssa

pytestmark = pytest.mark.usefixtures("cluster_state")

POLICY = "cluster-policy"

# Serves the nodes (all on all-disabled) and adds one config of its own.
SWITCH_OK = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  only-here:
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
"""
# Lacks all-disabled, which every node selects.
LACKS_IN_USE = """version: v1
mig-configs:
  all-1g:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""
# The typo: 3g.45gb in an H100 entry, in a config no node uses yet.
TYPO = SWITCH_OK.replace('{"3g.40gb": 2}', '{"3g.45gb": 2}')


def _patch(name: str) -> str:
    return json.dumps({"spec": {"migManager": {"config": {"name": name}}}})


def _policy_config(api: k8s.ApiClient) -> str:
    obj = k8s.CustomObjectsApi(api).get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", POLICY)
    return obj["spec"]["migManager"]["config"]["name"]


def _prepare(api: k8s.ApiClient, name: str, text: str) -> None:
    """A ConfigMap in the operator's namespace that is not in force and not labelled: the webhook does
    not check it when it is written, only when a switch names it."""
    ssa.apply(api, configmap(text, name=name), field_manager=MANAGER, force=True)


@pytest.mark.parametrize(
    ("target", "text", "rule", "says"),
    [
        ("no-such-mig-config", None, "configmap-missing", "does not exist"),
        (
            "lacks-in-use",
            LACKS_IN_USE,
            "config-not-found",
            "has no config 'all-disabled', which nodes gpu-node-1, gpu-node-2, gpu-node-3 select",
        ),
        ("has-a-typo", TYPO, "unknown-profile", 'mig-configs.only-here[0].mig-devices."3g.45gb"'),
        ("not-parsing", "version: v2\nmig-configs: {}\n", "unknown-version", "ConfigMap gpu-operator/not-parsing"),
    ],
)
def test_switch_to_a_configmap_that_cannot_serve_the_nodes_is_denied(
    api, kubectl, target: str, text: str | None, rule: str, says: str
) -> None:
    if text is not None:
        _prepare(api, target, text)
    for dry_run in (["--dry-run=server"], []):
        out = kubectl("patch", "clusterpolicy", POLICY, "--type=merge", "-p", _patch(target), *dry_run)
        assert out.returncode == 1, out.stdout + out.stderr
        assert "denied the request" in out.stderr and f"[{rule}]" in out.stderr and says in out.stderr, out.stderr
        assert "spec.migManager.config.name" in out.stderr
    with pytest.raises(ApiException) as exc:
        k8s.CustomObjectsApi(api).patch_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies", POLICY, json.loads(_patch(target))
        )
    assert exc.value.status == 422 and f"[{rule}]" in json.loads(exc.value.body)["message"]
    assert _policy_config(api) == "default-mig-parted-config"  # nothing was switched


def test_switch_to_a_good_configmap_is_admitted_and_then_in_force(api, kubectl) -> None:
    _prepare(api, "switch-ok", SWITCH_OK)
    out = kubectl("patch", "clusterpolicy", POLICY, "--type=merge", "-p", _patch("switch-ok"), "--dry-run=server")
    assert out.returncode == 0, out.stderr
    assert _policy_config(api) == "default-mig-parted-config"  # a dry run changes nothing
    out = kubectl("patch", "clusterpolicy", POLICY, "--type=merge", "-p", _patch("switch-ok"))
    assert out.returncode == 0, out.stderr
    assert _policy_config(api) == "switch-ok"

    # The webhook follows: a config only the new ConfigMap holds is now selectable, one only the old held is not.
    def follows() -> None:
        out = kubectl(
            "label", "node", "gpu-node-1", "nvidia.com/mig.config=only-here", "--overwrite", "--dry-run=server"
        )
        assert out.returncode == 0, out.stderr
        out = kubectl(
            "label", "node", "gpu-node-1", "nvidia.com/mig.config=all-1g.10gb", "--overwrite", "--dry-run=server"
        )
        assert out.returncode == 1 and "[config-not-found]" in out.stderr, out.stderr

    eventually(follows)
    # Switching back is judged the same way: NVIDIA's default config serves every node.
    out = kubectl("patch", "clusterpolicy", POLICY, "--type=merge", "-p", _patch("default-mig-parted-config"))
    assert out.returncode == 0, out.stderr


def test_switch_is_judged_on_the_configmap_as_it_is_now(api, kubectl) -> None:
    """The verdict of a switch is never cached: a denied switch goes through once the target is fixed."""
    _prepare(api, "fixed-later", TYPO)
    patch = ["patch", "clusterpolicy", POLICY, "--type=merge", "-p", _patch("fixed-later"), "--dry-run=server"]
    out = kubectl(*patch)
    assert out.returncode == 1 and "[unknown-profile]" in out.stderr, out.stderr
    _prepare(api, "fixed-later", SWITCH_OK)
    out = kubectl(*patch)
    assert out.returncode == 0, out.stderr
