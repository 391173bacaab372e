"""`migops local up --dra --repo`: the geometry comes from git. A pending claim for 3g.40gb on nodes
the repo configures all-1g.10gb waits; a commit moving them to all-3g.40gb is rolled out by the
reconciler, the agents' ResourceSlices follow, and kube-scheduler allocates the claim. A node a
dynamic MIG manager owns is shown Skipped, and never relabelled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import CONFIG_YAML, GitRepo, nodes_yaml
from kubernetes import client as k8s
from kubernetes import config
from local_cli import down_on_exit, migops_local
from pending_claims import claim_and_pod, pending_demand, scheduler_verdict
from polling import until

from migops.kube.owners import OWNER_LABEL
from migops.local.process import find_by_argument

pytestmark = pytest.mark.cluster
MIGOPS = Path(sys.executable).parent / "migops"
RG = ("resource.k8s.io", "v1")


def test_a_commit_serves_the_pending_claim(control_plane, tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "config-repo")
    repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": nodes_yaml(default="all-1g.10gb")})
    home = tmp_path / "home"

    def local(*args: str) -> subprocess.CompletedProcess[str]:
        return migops_local(home, *args)

    with down_on_exit(home):
        try:
            up = local(
                "up", "--dra", "--nodes", "2", "--gpu", "0x20B210DE", "--gpus-per-node", "1", "--repo", str(repo.path)
            )
            assert up.returncode == 0, up.stdout + up.stderr
            api = config.new_client_from_config(config_file=str(home / "local" / "admin.kubeconfig"))
            core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
            # gpu-node-2 is handed to a dynamic MIG manager before the rollout.
            core.patch_node("gpu-node-2", {"metadata": {"labels": {OWNER_LABEL: "hami"}}})

            def applied(node: str, name: str) -> bool:
                meta = core.read_node(node).metadata
                return (
                    meta.labels.get("nvidia.com/mig.config.state") == "success"
                    and (meta.annotations or {}).get("migops.io/mig.config.applied") == name
                )

            until(lambda: applied("gpu-node-1", "all-1g.10gb"), 120, "all-1g.10gb from git")
            core.create_namespace({"metadata": {"name": "team"}})
            claim_and_pod(core, custom, "team", "3g.40gb")

            assert "claim" in scheduler_verdict(core, "team", "train").lower()
            assert [sorted(d.profiles) for d in pending_demand(custom, "team")] == [["3g.40gb"]]

            repo.commit({"nodes.yaml": nodes_yaml(default="all-3g.40gb")}, "3g.40gb for the pending claim")
            until(lambda: applied("gpu-node-1", "all-3g.40gb"), 120, "all-3g.40gb rolled out")
            assert until(lambda: core.read_namespaced_pod("train", "team").spec.node_name, 60, "bound") == "gpu-node-1"
            allocated = custom.get_namespaced_custom_object(*RG, "team", "resourceclaims", "big")
            assert allocated["status"]["allocation"]["devices"]["results"][0]["pool"] == "gpu-node-1"

            # The owned node: never relabelled, and MigSync status says why.
            assert core.read_node("gpu-node-2").metadata.labels.get("nvidia.com/mig.config") != "all-3g.40gb"

            def skipped() -> dict | None:
                syncs = custom.list_cluster_custom_object("migops.io", "v1alpha1", "migsyncs")["items"]
                for s in syncs:
                    for n in (s.get("status") or {}).get("nodes") or []:
                        if n["name"] == "gpu-node-2" and n["phase"] == "Skipped":
                            return n
                return None

            entry = until(skipped, 60, "gpu-node-2 Skipped in MigSync status")
            assert "owned by hami" in entry["message"]
        finally:
            down = local("down")
    assert down.returncode == 0, down.stderr
    assert not find_by_argument(f"--work-dir={home / 'local' / 'agents' / 'gpu-node-1'}")
