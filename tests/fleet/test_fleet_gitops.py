"""The Argo CD and Flux objects that roll a fleet out wave by wave (migops.gitops.fleet_rollout), without a
cluster: their gating follows fleet.yaml's waves, `migops fleet gitops` prints the files under
examples/fleet/gitops/ that the fleet tests run (tests/argocd/test_argocd_fleet.py,
tests/flux/test_flux_fleet.py), and docs/fleet.md shows those files as they are."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from migops.api.names import FLEET_WAVE_LABEL
from migops.cli import main
from migops.gitops import fleet_rollout
from migops.gitops.fleet import FleetCluster, FleetFile, FleetProblem, directory_reader, parse_fleet

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fleet"
URL = "https://git.example.com/platform/mig-fleet.git"


def _fleet(*clusters: tuple[str, int]) -> FleetFile:
    return FleetFile("config.yaml", tuple(FleetCluster(n, w, f"clusters/{n}") for n, w in clusters))


def _example() -> FleetFile:
    problems: list[FleetProblem] = []
    found = parse_fleet(directory_reader(EXAMPLE), problems)
    assert found is not None and not problems
    return found


def test_the_applicationset_has_a_rolling_sync_step_per_wave_in_order_and_no_automated_sync() -> None:
    appset = fleet_rollout.applicationset(_fleet(("b", 5), ("a", 0), ("c", 2), ("d", 2)), URL)
    spec = appset["spec"]
    steps = spec["strategy"]["rollingSync"]["steps"]
    assert spec["strategy"]["type"] == "RollingSync"
    assert [s["matchExpressions"] for s in steps] == [
        [{"key": FLEET_WAVE_LABEL, "operator": "In", "values": [w]}] for w in ("0", "2", "5")
    ]
    assert {s["maxUpdate"] for s in steps} == {"100%"}
    (generator,) = spec["generators"]
    assert generator["clusters"]["selector"]["matchExpressions"][0]["values"] == ["0", "2", "5"]
    template = spec["template"]
    # The Application's wave label is the cluster Secret's: the steps select on it.
    assert template["metadata"]["labels"] == {FLEET_WAVE_LABEL: '{{index .metadata.labels "migops.io/fleet-wave"}}'}
    assert template["spec"]["source"] == {"repoURL": URL, "targetRevision": "main", "path": "clusters/{{.name}}/sync"}
    assert template["spec"]["destination"]["server"] == "{{.server}}"
    # RollingSync starts each sync itself and turns an automated policy off: none is written.
    assert "automated" not in template["spec"]["syncPolicy"]


def test_a_cluster_outside_clusters_name_cannot_be_templated() -> None:
    fleet = FleetFile("config.yaml", (FleetCluster("a", 0, "clusters/a"), FleetCluster("b", 1, "gpu/b")))
    with pytest.raises(ValueError, match="cluster\\(s\\) b have another path"):
        fleet_rollout.applicationset(fleet, URL)


def test_a_cluster_secret_carries_its_wave_and_lets_argo_cd_manage_the_migsync_namespace_only() -> None:
    secret = fleet_rollout.argocd_cluster_secret(FleetCluster("train", 1, "clusters/train"), "https://t", {"a": 1})
    assert secret["metadata"]["labels"] == {"argocd.argoproj.io/secret-type": "cluster", FLEET_WAVE_LABEL: "1"}
    assert secret["stringData"] == {
        "name": "train",
        "server": "https://t",
        "namespaces": "migops-system",
        "clusterResources": "false",
        "config": json.dumps({"a": 1}),
    }


def test_each_kustomization_depends_on_the_whole_wave_before_it_and_waits_for_its_migsync() -> None:
    objects = fleet_rollout.flux_objects(_fleet(("a", 0), ("b", 1), ("c", 1), ("d", 3)), URL)
    source, *ks = objects
    assert source["kind"] == "GitRepository" and source["spec"]["url"] == URL
    by_name = {k["metadata"]["name"]: k["spec"] for k in ks}
    assert [d.get("dependsOn") for d in by_name.values()] == [
        None,
        [{"name": "mig-fleet-a"}],
        [{"name": "mig-fleet-a"}],
        [{"name": "mig-fleet-b"}, {"name": "mig-fleet-c"}],
    ]
    for name, spec in by_name.items():
        cluster = name.removeprefix("mig-fleet-")
        assert spec["path"] == f"./clusters/{cluster}/sync"
        assert spec["kubeConfig"] == {"secretRef": {"name": f"mig-fleet-{cluster}-kubeconfig", "key": "value"}}
        assert spec["wait"] is True and spec["prune"] is False


@pytest.mark.parametrize("tool", ["argocd", "flux"])
def test_fleet_gitops_prints_the_example_files(tool: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", "gitops", "--tool", tool, str(EXAMPLE)]) == 0
    assert capsys.readouterr().out == (EXAMPLE / "gitops" / f"{tool}.yaml").read_text()
    objects = [d for d in yaml.safe_load_all((EXAMPLE / "gitops" / f"{tool}.yaml").read_text()) if d]
    expected = (
        [fleet_rollout.applicationset(_example(), URL)]
        if tool == "argocd"
        else fleet_rollout.flux_objects(_example(), URL)
    )
    assert objects == expected


@pytest.mark.parametrize("tool", ["argocd", "flux"])
def test_docs_show_the_objects_that_run(tool: str) -> None:
    """docs/fleet.md quotes each file whole (the tests apply these very objects)."""
    text = (EXAMPLE / "gitops" / f"{tool}.yaml").read_text()
    assert f"```yaml\n{text}```" in (ROOT / "docs" / "fleet.md").read_text()


def test_without_one_url_the_command_asks_for_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet"
    shutil.copytree(EXAMPLE, fleet)
    migsync = fleet / "clusters" / "train" / "sync" / "migsync.yaml"
    migsync.write_text(migsync.read_text().replace(URL, "https://elsewhere.example.com/r.git"))
    assert main(["fleet", "gitops", "--tool", "flux", str(fleet)]) == 2
    assert "name 2 URL(s) (give the repository's with --url)" in capsys.readouterr().err
    assert main(["fleet", "gitops", "--tool", "flux", str(fleet), "--url", "https://u"]) == 0
    assert "url: https://u\n" in capsys.readouterr().out
