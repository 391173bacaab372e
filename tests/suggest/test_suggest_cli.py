"""`migops suggest` as a user runs it: a config repo's working tree (real git), the cluster's objects as
`kubectl get nodes,pods -A -o json` prints them; text, json (its schema), a patch `git apply` takes,
--write, --commit --branch --push to a real remote, and a repo that does not validate."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest
from gitrepo import CONFIG_YAML, nodes_yaml, run
from suggest_fixtures import ONE_G, node, pod

from migops.cli import main
from migops.cli.outputs import json_schema
from migops.suggest.edit import edit_nodes

NODES = "# our GPU nodes\n" + nodes_yaml(
    "  - nodeSelector: {matchLabels: {pool: ml}}   # the ML pool\n    config: all-1g.10gb", strategy="mixed"
)


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "clusters/prod").mkdir(parents=True)
    (root / "clusters/prod/config.yaml").write_text(CONFIG_YAML)
    (root / "clusters/prod/nodes.yaml").write_text(NODES)
    run(["git", "init", "-q", "-b", "main", str(root)])
    run(["git", "add", "-A"], cwd=root)
    run(["git", "commit", "-q", "-m", "init"], cwd=root)
    return root


def objects(tmp_path: Path, nodes: list[dict], pods: list[dict]) -> Path:
    policy = {"kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"mig": {"strategy": "mixed"}}}
    items = [{"kind": "Node", **n} for n in nodes] + [{"kind": "Pod", **p} for p in pods] + [policy]
    f = tmp_path / "cluster.json"
    f.write_text(json.dumps({"kind": "List", "items": items}))
    return f


def cluster(tmp_path: Path) -> Path:
    return objects(
        tmp_path,
        [node("n1", [ONE_G], pool="ml"), node("n2", [ONE_G], pool="ml")],
        [pod("run", "nvidia.com/mig-1g.10gb", node="n1"), pod("a"), pod("b"), pod("c")],
    )


def suggest(capsys, tree: Path, objs: Path, *args: str) -> tuple[int, str, str]:
    code = main(["suggest", str(tree), "--path", "clusters/prod", "--objects", str(objs), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_text_names_the_change_the_pods_and_why(capsys, tree: Path, tmp_path: Path) -> None:
    code, out, _ = suggest(capsys, tree, cluster(tmp_path))
    assert code == 0
    assert "n2: all-1g.10gb -> all-3g.40gb" in out
    assert "3g.40gb on n2: 2 (ml/a, ml/b)" in out
    assert "ml/c (3g.40gb):" in out
    assert "n1" not in out.split("Not served")[0].replace("ml/", "")  # n1 (a running pod) is not changed
    assert (tree / "clusters/prod/nodes.yaml").read_text() == NODES  # nothing written without --write


def test_json_matches_its_schema(capsys, tree: Path, tmp_path: Path) -> None:
    code, out, _ = suggest(capsys, tree, cluster(tmp_path), "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "suggest/v1" and doc["outcome"] == "proposal"
    assert list(jsonschema.Draft202012Validator(json_schema("suggest")).iter_errors(doc)) == []
    assert doc["changes"] == [
        {
            "node": "n2",
            "from": "all-1g.10gb",
            "to": "all-3g.40gb",
            "newConfig": False,
            "gpus": [0],
            "instances": {"kept": 0, "destroyed": 7, "created": 2},
        }
    ]
    assert [u["pod"] for u in doc["unserved"]] == ["ml/c"]
    assert doc["solver"]["optimal"] is True


def test_the_patch_applies_at_the_repo_root_and_keeps_comments(capsys, tree: Path, tmp_path: Path) -> None:
    code, out, _ = suggest(capsys, tree, cluster(tmp_path), "-o", "patch")
    assert code == 0 and out.startswith("--- a/clusters/prod/nodes.yaml\n+++ b/clusters/prod/nodes.yaml\n")
    subprocess.run(["git", "apply"], cwd=tree, input=out, text=True, check=True)
    text = (tree / "clusters/prod/nodes.yaml").read_text()
    assert "# our GPU nodes" in text and "# the ML pool" in text
    assert text.endswith("  - nodes: [n2]\n    config: all-3g.40gb\n")


def test_the_patch_applies_to_a_file_without_a_final_newline(capsys, tree: Path, tmp_path: Path) -> None:
    (tree / "clusters/prod/nodes.yaml").write_text(NODES.rstrip("\n"))
    code, out, _ = suggest(capsys, tree, cluster(tmp_path), "-o", "patch")
    assert code == 0 and "\\ No newline at end of file" in out
    subprocess.run(["git", "apply"], cwd=tree, input=out, text=True, check=True)
    assert (tree / "clusters/prod/nodes.yaml").read_text().endswith("  - nodes: [n2]\n    config: all-3g.40gb\n")


def test_write_then_nothing_more_to_propose(capsys, tree: Path, tmp_path: Path) -> None:
    objs = cluster(tmp_path)
    assert suggest(capsys, tree, objs, "--write")[0] == 0
    assert "config: all-3g.40gb" in (tree / "clusters/prod/nodes.yaml").read_text()
    code, out, _ = suggest(capsys, tree, objs, "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["outcome"] == "no-change" and doc["patch"] == ""


def test_commit_to_a_branch_and_push(capsys, tree: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    run(["git", "clone", "-q", "--bare", str(tree), str(remote)])
    run(["git", "remote", "add", "origin", str(remote)], cwd=tree)
    code, _, err = suggest(capsys, tree, cluster(tmp_path), "--commit", "--branch", "suggest/3g", "--push")
    assert code == 0, err
    assert run(["git", "status", "--porcelain"], cwd=tree) == ""  # the checkout is left as it was
    assert run(["git", "branch", "--show-current"], cwd=tree).strip() == "main"
    message = run(["git", "log", "-1", "--format=%B", "suggest/3g"], cwd=remote)
    assert message.startswith("migops suggest: serve 2 of 3 pending MIG pods: 1 node, 1 GPU reconfigured")
    assert "n2: all-1g.10gb -> all-3g.40gb" in message
    shown = run(["git", "show", "suggest/3g:clusters/prod/nodes.yaml"], cwd=remote)
    assert shown == edit_nodes(NODES, {"n2": "all-3g.40gb"})
    assert run(["git", "worktree", "list"], cwd=tree).count("\n") == 1  # the temporary worktree is gone
    # From the remote itself (--repo): the same proposal on another branch.
    code = main(
        [
            "suggest",
            "--repo",
            str(remote),
            "--ref",
            "main",
            "--path",
            "clusters/prod",
            "--objects",
            str(cluster(tmp_path)),
            "--commit",
            "--branch",
            "again",
            "--push",
        ]
    )
    assert code == 0
    assert run(["git", "show", "again:clusters/prod/nodes.yaml"], cwd=remote) == shown


def test_no_pending_demand_says_so(capsys, tree: Path, tmp_path: Path) -> None:
    objs = objects(tmp_path, [node("n1", [ONE_G], pool="ml")], [pod("run", "nvidia.com/mig-1g.10gb", node="n1")])
    code, out, _ = suggest(capsys, tree, objs)
    assert code == 0 and out.startswith("no pending MIG demand\n")
    doc = json.loads(suggest(capsys, tree, objs, "-o", "json")[1])
    assert doc["outcome"] == "no-demand" and doc["changes"] == [] and doc["patch"] == ""
    assert list(jsonschema.Draft202012Validator(json_schema("suggest")).iter_errors(doc)) == []
    code, out, _ = suggest(capsys, tree, objs, "--commit", "--branch", "x")
    assert code == 0 and "x" not in run(["git", "branch"], cwd=tree)


def test_an_invalid_repo_is_refused_with_the_problems_validate_gives(capsys, tree: Path, tmp_path: Path) -> None:
    bad = nodes_yaml("  - nodes: [n1]\n    config: all-4g.40gb")
    (tree / "clusters/prod/nodes.yaml").write_text(bad)
    code, out, _ = suggest(capsys, tree, cluster(tmp_path), "-o", "json")
    doc = json.loads(out)
    assert code == 1 and doc["outcome"] == "invalid"
    assert list(jsonschema.Draft202012Validator(json_schema("suggest")).iter_errors(doc)) == []
    main(["validate", "-o", "json", str(tree / "clusters/prod")])
    validate = json.loads(capsys.readouterr().out)
    theirs = {(p["path"], p["rule"]) for s in validate["sources"] for p in s["problems"] if p["severity"] == "error"}
    ours = {(p["path"], p["rule"]) for p in doc["problems"] if p["severity"] == "error"}
    assert ours == theirs == {("assignments[0].config", "config-not-found")}


def test_without_the_suggest_extra_it_names_the_extra(capsys, tree: Path, tmp_path: Path, without_or_tools) -> None:
    """OR-Tools is the optional extra migops[suggest] (a pre-commit hook's `migops validate` never needs
    it): without it, suggest says so first, with the pip command, and exits 3."""
    code, out, err = suggest(capsys, tree, cluster(tmp_path))
    assert code == 3 and out == ""
    assert "migops suggest: the solver OR-Tools is not installed" in err
    assert "pip install 'migops[suggest]'" in err


def test_usage_errors(capsys, tree: Path, tmp_path: Path) -> None:
    assert main(["suggest", str(tree), "--commit"]) == 2
    assert main(["suggest", "--repo", str(tree), "--write"]) == 2
    assert main(["suggest", str(tree), "--path", "clusters/prod", "--objects", str(tmp_path / "missing.json")]) == 2
    assert main(["suggest", str(tree), "--objects", str(cluster(tmp_path))]) == 1  # no config.yaml at the root


def test_a_new_named_config_only_when_the_policy_allows_it(capsys, tree: Path, tmp_path: Path) -> None:
    objs = objects(tmp_path, [node("n1", [ONE_G], pool="ml")], [pod("big", "nvidia.com/mig-4g.40gb")])
    code, out, _ = suggest(capsys, tree, objs)
    assert code == 0 and "ml/big (4g.40gb): no config of config.yaml offers 4g.40gb" in out
    (tree / "clusters/prod/nodes.yaml").write_text(NODES + "suggest:\n  newConfigs: true\n")
    code, out, _ = suggest(capsys, tree, objs, "-o", "json")
    doc = json.loads(out)
    assert code == 0 and list(jsonschema.Draft202012Validator(json_schema("suggest")).iter_errors(doc)) == []
    assert doc["changes"][0]["to"] == "suggest-4g.40gb" and doc["changes"][0]["newConfig"] is True
    assert doc["newConfigs"] == {
        "suggest-4g.40gb": 'suggest-4g.40gb:\n  - device-filter: ["0x233010DE"]\n    devices: all\n'
        '    mig-enabled: true\n    mig-devices:\n      "4g.40gb": 1\n'
    }
    assert [s["pod"] for s in doc["served"]] == ["ml/big"]
    subprocess.run(["git", "apply"], cwd=tree, input=doc["patch"], text=True, check=True)
    assert "  suggest-4g.40gb:\n    - device-filter:" in (tree / "clusters/prod/config.yaml").read_text()
    assert main(["validate", str(tree / "clusters/prod")]) == 0  # the grown repo validates


def claim(name: str, expression: str, *, allocated: bool = False) -> dict:
    """A resource.k8s.io/v1 ResourceClaim asking for one device of the NVIDIA driver's MIG class."""
    obj = {
        "kind": "ResourceClaim",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "exactly": {
                            "deviceClassName": "mig.nvidia.com",
                            "selectors": [{"cel": {"expression": expression}}],
                        },
                    }
                ]
            }
        },
    }
    if allocated:
        obj["status"] = {"allocation": {"devices": {"results": []}}}
    return obj


def claim_pod(name: str, claim_name: str) -> dict:
    """A pending pod that waits for a ResourceClaim (spec.resourceClaims names it)."""
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
        },
        "status": {"phase": "Pending"},
    }


def test_pending_resource_claims_a_pod_waits_for_are_demand(capsys, tree: Path, tmp_path: Path) -> None:
    """A DRA claim whose CEL selector picks 3g.40gb counts as demand (mig.dra evaluates it) when a pending
    pod waits for it; an allocated one does not, nor one no pod uses -- unless the policy says so."""
    objs = objects(tmp_path, [node("n1", [ONE_G], pool="ml"), node("n2", [ONE_G], pool="ml")], [])
    doc = json.loads(objs.read_text())
    wanted = 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'
    doc["items"] += [claim("wants-3g", wanted), claim("has-3g", wanted, allocated=True), claim("nobody", wanted)]
    doc["items"] += [claim_pod("trainer", "wants-3g")]
    objs.write_text(json.dumps(doc))
    code, out, _ = suggest(capsys, tree, objs, "-o", "json")
    result = json.loads(out)
    assert code == 0 and result["outcome"] == "proposal", out
    assert [c["to"] for c in result["changes"]] == ["all-3g.40gb"]
    assert [d["pod"] for d in result["demand"]] == ["ml/wants-3g"]
    (tree / "clusters/prod/nodes.yaml").write_text(NODES + "suggest:\n  claimsWithoutPods: true\n")
    result = json.loads(suggest(capsys, tree, objs, "-o", "json")[1])
    assert sorted(d["pod"] for d in result["demand"]) == ["ml/nobody", "ml/wants-3g"]


@pytest.mark.parametrize("name", ["y", "N", "on", "1e3", "1e10", "0x10", "123", "1.50"])
def test_node_names_yaml_would_misread_are_written_quoted_with_comments_kept(
    capsys, tree: Path, tmp_path: Path, name: str
) -> None:
    objs = objects(tmp_path, [node(name, [ONE_G], pool="ml")], [pod("a")])
    code, out, err = suggest(capsys, tree, objs, "-o", "json")
    doc = json.loads(out)
    assert code == 0 and err == "" and doc["changes"][0]["node"] == name, err
    assert f'+  - nodes: ["{name}"]\n+    config: all-3g.40gb\n' in doc["patch"]
    subprocess.run(["git", "apply"], cwd=tree, input=doc["patch"], text=True, check=True)
    assert "# the ML pool" in (tree / "clusters/prod/nodes.yaml").read_text()
    assert main(["validate", str(tree / "clusters/prod")]) == 0


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "-inf", "soon"])
def test_the_time_limit_must_be_a_finite_number_of_seconds(capsys, tree: Path, tmp_path: Path, value: str) -> None:
    with pytest.raises(SystemExit) as exc:
        suggest(capsys, tree, cluster(tmp_path), "--time-limit", value)
    assert exc.value.code == 2
    assert "--time-limit" in capsys.readouterr().err


def test_a_failure_is_a_message_and_exit_3_never_a_traceback(capsys, tree: Path, tmp_path: Path, monkeypatch) -> None:
    """Whatever goes wrong inside (here: the edited file does not resolve as proposed), the user reads
    what failed and gets the documented exit code; nothing is written."""
    import migops.suggest.run as run_module

    monkeypatch.setattr(run_module, "_holds", lambda *args: False)
    code, out, err = suggest(capsys, tree, cluster(tmp_path), "--write")
    assert code == 3 and out == ""
    assert (
        err.startswith("migops suggest: the proposal (n2 -> all-3g.40gb) could not be written")
        and "Traceback" not in err
    )
    assert (tree / "clusters/prod/nodes.yaml").read_text() == NODES
    monkeypatch.setattr(run_module, "_holds", lambda *args: 1 / 0)
    code, out, err = suggest(capsys, tree, cluster(tmp_path))
    assert code == 3 and "internal error" in err and "ZeroDivisionError" in err and "Traceback" not in err
