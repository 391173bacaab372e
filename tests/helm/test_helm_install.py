"""`helm install`, `helm test`, `helm upgrade` and `helm uninstall` on the real node, as a GPU Operator user
installs a release: from the files `make release` writes (hack/release.py, built into one temporary
directory and copied into another, as a download would be), with nothing of the checkout: the image
archive imported into migops-node's containerd (the manifest its digest file names), the packaged chart
installing the image of its appVersion, every command run from the release's directory. A release namespace of its own (not migops-system, so the chart's
namespace handling is exercised), mode mig-manager (the webhook and the reconciler in pods; NVIDIA's
mig-manager would apply). The release's files are checked to say one version, and its checksums to hold.

Runs after tests/e2e (same real node, one session): that module removes its overlay before this one
installs the chart, whose cluster-scoped names are the same. The image build is migops.local.image's,
whose cache tests/e2e has already filled: the release converts the same image.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from chart_helpers import ROOT
from kubernetes import client as k8s
from polling import until

from migops.local import agents, cluster

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
RELEASE, NS = "migops", "migops-helm"
BAD = (
    'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: helm-probe\n  namespace: gpu-operator\n'
    '  labels: {migops.io/mig-config: "true"}\ndata:\n  config.yaml: |\n    version: v1\n    mig-configs:\n'
    '      typo:\n        - devices: all\n          mig-enabled: true\n          mig-devices: {"1g.9gb": 1}\n'
)
FILES = {
    f"migops-{VERSION}-py3-none-any.whl",
    f"migops-{VERSION}.tar.gz",
    f"migops-image-{VERSION}.oci.tar",
    f"migops-image-{VERSION}.oci.tar.sha256-digest",
    f"migops-{VERSION}.tgz",
    f"migops-image-{VERSION}.cdx.json",
    f"migops-{VERSION}.notes.md",
    "SHA256SUMS",
}


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make release`'s files, built into one directory and copied into another (what a user downloads)."""
    built = tmp_path_factory.mktemp("release-build") / "dist"
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "release.py"), "--dist", str(built)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    print(f"hack/release.py: {time.monotonic() - start:.1f}s")
    downloaded = tmp_path_factory.mktemp("downloaded")
    for path in built.iterdir():
        shutil.copy2(path, downloaded)
    shutil.rmtree(built)
    return downloaded


def _values() -> list[str]:
    """The chart's own image, migops:<appVersion>: the name the archive carries (a registry would add
    image.repository and image.digest; containerd keeps no digest name for an imported image)."""
    pin = '{"kubernetes.io/hostname":"migops-node"}'
    return [
        "--set",
        "mode=mig-manager",
        "--set",
        "image.pullPolicy=Never",
        "--set-json",
        f"webhook.nodeSelector={pin}",
        "--set-json",
        f"reconciler.nodeSelector={pin}",
        "--set",
        "reconciler.replicas=1",
    ]


def _helm(
    helm: Path, release: Path, *args: str, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """helm run from the release's directory: every file it names is one of the release's."""
    out = subprocess.run([str(helm), *args], cwd=release, capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert out.returncode == 0, f"helm {' '.join(args)}:\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def installed(real_node, helm: Path, release: Path):
    real_node.load_image(release / f"migops-image-{VERSION}.oci.tar")
    # The image containerd now holds under the release's name is the manifest the digest file names.
    digest = (release / f"migops-image-{VERSION}.oci.tar.sha256-digest").read_text().strip()
    listed = real_node.node.ctr("images", "ls", f"name==docker.io/library/migops:{VERSION}")
    assert digest in listed, listed
    api = real_node.admin
    cluster.seed(api, [], "mixed")
    agents.seed_mig_config(api)
    kube = ["--kubeconfig", str(real_node.kubeconfig)]
    # What NOTES.txt tells a user to do first: the ClusterPolicy names the chart's MIG ConfigMap (the
    # components may read only that one: without it their informers never sync and no pod is Ready).
    policy = ["patch", "clusterpolicies.nvidia.com/cluster-policy", "--type", "merge", "-p"]
    _kubectl(real_node, kube, *policy, '{"spec":{"migManager":{"config":{"name":"migops-mig-config"}}}}')
    start = time.monotonic()
    chart = f"./migops-{VERSION}.tgz"
    install = ["install", RELEASE, chart, "-n", NS, "--create-namespace", "--wait", "--timeout", "5m"]
    _helm(helm, release, *install, *_values(), *kube, timeout=420)
    print(f"helm install --wait: {time.monotonic() - start:.1f}s")
    yield real_node, release, kube
    # What uninstall must leave: no object of the release anywhere (the webhook configurations included,
    # so nothing is locked out); only the CRD (Helm's rule for crds/) and the namespace Helm created.
    _helm(helm, release, "uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "3m", *kube, check=False)
    subprocess.run(
        [str(real_node.kubectl), *kube, "delete", "namespace", NS, "--wait=true", "--timeout=120s"],
        capture_output=True,
        timeout=180,
    )
    _kubectl(real_node, kube, *policy, '{"spec":{"migManager":{"config":{"name":"default-mig-parted-config"}}}}')


def _kubectl(real_node, kube: list[str], *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(real_node.kubectl), *kube, *args], input=input, capture_output=True, text=True, timeout=120
    )


def _denied(real_node, kube: list[str]) -> str:
    out = _kubectl(real_node, kube, "apply", "--dry-run=server", "-f", "-", input=BAD)
    return out.stderr


def test_install_brings_every_pod_to_ready_and_the_webhook_denies_a_bad_config(installed) -> None:
    real_node, _, kube = installed
    pods = k8s.CoreV1Api(real_node.admin).list_namespaced_pod(NS, label_selector="app.kubernetes.io/instance=migops")
    names = sorted(p.metadata.name for p in pods.items)
    assert len([n for n in names if n.startswith("migops-webhook-")]) == 2, names
    assert len([n for n in names if n.startswith("migops-reconciler-")]) == 1, names
    for pod in pods.items:
        ready = {c.type: c.status for c in pod.status.conditions or ()}.get("Ready")
        assert ready == "True", (pod.metadata.name, pod.status.phase)
        assert pod.spec.node_name == "migops-node"
        for container in pod.spec.containers:
            assert container.image == f"migops:{VERSION}", container.image  # the chart's appVersion
    message = _denied(real_node, kube)
    assert "denied by migops" in message and "1g.9gb" in message and "[unknown-profile]" in message, message


def test_helm_test_hook_passes(installed, helm: Path) -> None:
    _, release, kube = installed
    out = _helm(helm, release, "test", RELEASE, "-n", NS, "--timeout", "3m", *kube, check=False, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Phase:          Succeeded" in out.stdout, out.stdout


def test_upgrade_rolls_out_without_an_admission_gap(installed, helm: Path) -> None:
    """webhook.replicas 2 -> 3 (a rolling update of the webhook pods): every review made meanwhile is
    answered by migops (a denial of the bad config), none fails at the API server."""
    real_node, release, kube = installed
    answers: list[str] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            answers.append(_denied(real_node, kube))
            time.sleep(0.2)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        _helm(
            helm,
            release,
            "upgrade",
            RELEASE,
            f"./migops-{VERSION}.tgz",
            "-n",
            NS,
            "--wait",
            "--timeout",
            "5m",
            *_values(),
            "--set",
            "webhook.replicas=3",
            "--set",
            "webhook.resources.requests.cpu=50m",
            *kube,
            timeout=420,
        )
        time.sleep(2)
    finally:
        stop.set()
        thread.join(timeout=60)
    gaps = [a for a in answers if "denied by migops" not in a]
    assert len(answers) >= 5 and not gaps, (len(answers), gaps[:3])
    deploy = k8s.AppsV1Api(real_node.admin).read_namespaced_deployment("migops-webhook", NS)
    assert deploy.spec.replicas == 3 and deploy.status.ready_replicas == 3


def test_uninstall_leaves_no_object_of_the_release(installed, helm: Path) -> None:
    real_node, release, kube = installed
    _helm(helm, release, "uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "3m", *kube, timeout=240)
    kinds = (
        "all,configmaps,secrets,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings,"
        "validatingwebhookconfigurations,mutatingwebhookconfigurations,validatingadmissionpolicies,"
        "validatingadmissionpolicybindings,poddisruptionbudgets,cronjobs,migsyncs"
    )

    def nothing_left() -> bool:
        # The pods go after their ReplicaSets (garbage collection, then a graceful stop): waited for.
        left = _kubectl(real_node, kube, "get", kinds, "-A", "-l", "app.kubernetes.io/part-of=migops", "-o", "name")
        assert left.returncode == 0, left.stderr
        return left.stdout.split() == []

    until(nothing_left, timeout=120, what="every object of the release gone", interval=1.0)
    webhooks = _kubectl(
        real_node, kube, "get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o", "name"
    )
    assert "migops" not in webhooks.stdout
    # Nothing is locked out: the bad config is now judged by no one (the dry-run succeeds).
    out = _kubectl(real_node, kube, "apply", "--dry-run=server", "-f", "-", input=BAD)
    assert out.returncode == 0, out.stderr


def _oci_blob(archive: Path, digest: str) -> bytes:
    with tarfile.open(archive) as tar:
        return tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}").read()


def test_the_release_says_one_version_and_its_checksums_hold(installed, helm: Path, tmp_path: Path) -> None:
    _, release, _ = installed
    assert {p.name for p in release.iterdir()} == FILES
    sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=release, capture_output=True, text=True)
    assert sums.returncode == 0 and sums.stdout.count(": OK") == len(FILES) - 1, sums.stdout + sums.stderr

    # The CLI from the wheel (its dependencies from this virtualenv), run outside the checkout.
    wheel = release / f"migops-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        assert f"Version: {VERSION}\n" in zf.read(f"migops-{VERSION}.dist-info/METADATA").decode()
    lib = tmp_path / "lib"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(lib), str(wheel)]
    subprocess.run(pip, check=True, capture_output=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(lib)}
    cli = [sys.executable, "-m", "migops"]
    where = subprocess.run(
        [sys.executable, "-c", "import migops; print(migops.__file__)"],
        cwd=release,
        env=env,
        capture_output=True,
        text=True,
    )
    assert where.stdout.startswith(str(lib)), where.stdout + where.stderr
    shown = subprocess.run([*cli, "--version"], cwd=release, env=env, capture_output=True, text=True, timeout=60)
    assert shown.stdout == f"migops {VERSION}\n", shown.stdout + shown.stderr
    checked = subprocess.run([*cli, "validate", "-"], input=BAD, cwd=release, env=env, capture_output=True, text=True)
    assert checked.returncode == 1 and "[unknown-profile]" in checked.stdout, checked.stdout + checked.stderr
    with tarfile.open(release / f"migops-{VERSION}.tar.gz") as sdist:
        info = sdist.extractfile(f"migops-{VERSION}/PKG-INFO").read().decode()
    assert f"Version: {VERSION}\n" in info

    chart = yaml.safe_load(_helm(helm, release, "show", "chart", f"./migops-{VERSION}.tgz").stdout)
    assert (chart["name"], chart["version"], chart["appVersion"]) == ("migops", VERSION, VERSION)
    assert "name: migsyncs.migops.io" in _helm(helm, release, "show", "crds", f"./migops-{VERSION}.tgz").stdout

    archive = release / f"migops-image-{VERSION}.oci.tar"
    with tarfile.open(archive) as tar:
        (entry,) = json.loads(tar.extractfile("index.json").read())["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == f"docker.io/library/migops:{VERSION}"
    digest = (release / f"migops-image-{VERSION}.oci.tar.sha256-digest").read_text()
    assert digest == f"{entry['digest']}\n"
    manifest = json.loads(_oci_blob(archive, entry["digest"]))
    assert manifest["annotations"]["org.opencontainers.image.version"] == VERSION
    config = json.loads(_oci_blob(archive, manifest["config"]["digest"]))
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == VERSION
    assert config["config"]["User"] == "65532:65532"
    # The wheel the image holds is this release's: its dist-info in the last layer that has one.
    found = []
    with tarfile.open(archive) as tar:
        for layer in manifest["layers"]:
            blob = tar.extractfile(f"blobs/sha256/{layer['digest'].removeprefix('sha256:')}")
            with tarfile.open(fileobj=blob, mode="r|gz") as files:
                found += [m.name for m in files if m.name.endswith(".dist-info") and "/migops-" in m.name]
    assert any(name.endswith(f"/migops-{VERSION}.dist-info") for name in found), found

    bom = json.loads((release / f"migops-image-{VERSION}.cdx.json").read_text())
    assert bom["bomFormat"] == "CycloneDX" and bom["metadata"]["component"]["version"] == VERSION
    locked = {}  # name -> (version, the hashes pip checks)
    for block in re.split(r"\n(?=[A-Za-z0-9])", (ROOT / "requirements.lock").read_text()):
        if found := re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", block):
            locked[found.group(1).lower()] = (found.group(2), set(re.findall(r"--hash=sha256:([0-9a-f]{64})", block)))
    listed = {
        c["name"].lower(): (
            c["version"],
            {
                h["content"]
                for r in c.get("externalReferences", ())
                for h in r.get("hashes", ())
                if h["alg"] == "SHA-256"
            },
        )
        for c in bom["components"]
    }
    assert listed == locked
    notes = (release / f"migops-{VERSION}.notes.md").read_text()
    assert notes.startswith(f"## [{VERSION}] — ")
