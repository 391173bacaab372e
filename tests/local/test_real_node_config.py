"""The real node's generated files, without starting it: image archives, CNI network, runtime configs."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

from migops.local import nodenet, ociimage, realnode


def _members(blob: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_an_oci_archive_names_its_image_and_its_digests_match() -> None:
    blob = ociimage.archive(
        "migops.local/x:1",
        {"bin/tool": ociimage.File(b"#!", 0o755), "bin/sh": ociimage.File(link="tool")},
        cmd=["tool"],
    )
    files = _members(blob)
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"][ociimage.NAME_ANNOTATION] == "migops.local/x:1"
    for name, body in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(body).hexdigest() == name.rsplit("/", 1)[1]
    manifest = json.loads(files[f"blobs/sha256/{entry['digest'][7:]}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
    assert config["config"]["Cmd"] == ["tool"]
    layer = files[f"blobs/sha256/{manifest['layers'][0]['digest'][7:]}"]
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin"].isdir()
    assert members["bin/tool"].mode == 0o755
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "tool"
    # Deterministic: the same files give the same image.
    assert (
        ociimage.archive(
            "migops.local/x:1",
            {"bin/tool": ociimage.File(b"#!", 0o755), "bin/sh": ociimage.File(link="tool")},
            cmd=["tool"],
        )
        == blob
    )


def test_pods_get_routes_only_to_their_range_and_the_service_range(tmp_path: Path) -> None:
    net = nodenet.Network(service_cidr="10.0.0.0/24")
    conf = json.loads(nodenet.cni_conflist(net, tmp_path / "ipam"))
    (bridge,) = conf["plugins"]
    assert bridge["bridge"] == nodenet.BRIDGE
    # Neither a /24 on the bridge and global forwarding (isGateway) nor NAT to the outside (ipMasq).
    assert bridge["isGateway"] is False and bridge["ipMasq"] is False
    ipam = bridge["ipam"]
    assert ipam["routes"] == [{"dst": "10.0.0.0/24"}]  # no 0.0.0.0/0
    (rng,) = ipam["ranges"][0]
    assert rng["subnet"] == nodenet.POD_CIDR and rng["gateway"] == nodenet.NODE_IP
    assert ipam["dataDir"] == str(tmp_path / "ipam")


def test_containerd_keeps_its_state_under_the_node_directory_and_answers_the_machine(tmp_path: Path) -> None:
    lay = realnode.Layout(tmp_path)
    conf = tomllib.loads(realnode.containerd_config(lay, "/usr/sbin/runc"))
    for key in ("root", "state", "temp"):
        assert conf[key].startswith(str(tmp_path) + "/")
    assert conf["grpc"]["address"] == str(lay.socket)
    runtime = conf["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE
    assert runtime["netns_mounts_under_state_dir"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc["SystemdCgroup"] is False and runc["Root"].startswith(str(tmp_path) + "/")
    assert conf["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "migops.local/pause:1"
    assert "io.containerd.nri.v1.nri" in conf["disabled_plugins"]


def test_kubelet_and_kube_proxy_settings_answer_the_machine(tmp_path: Path) -> None:
    lay = realnode.Layout(tmp_path)
    kubelet = realnode.kubelet_config(lay, tmp_path / "client-ca.crt", nodenet.NODE_IP)
    assert kubelet["failCgroupV1"] is False and kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["authentication"]["anonymous"]["enabled"] is False
    assert kubelet["podLogsDir"].startswith(str(tmp_path) + "/")
    assert kubelet["address"] == nodenet.NODE_IP and kubelet["readOnlyPort"] == 0
    proxy = realnode.kube_proxy_config(tmp_path / "kc", "n", nodenet.Network(service_cidr="10.0.0.0/24"))
    assert proxy["mode"] == "iptables"
    assert proxy["iptables"]["localhostNodePorts"] is False  # no route_localnet on the host
    assert proxy["nodePortAddresses"] == [f"{nodenet.NODE_IP}/32"]
    assert proxy["conntrack"]["maxPerCore"] == 0  # leave the host's conntrack table alone


def test_unix_sockets_under_the_node_directory_fit() -> None:
    # containerd refuses socket paths over 104 bytes; the kubelet's deepest is pod-resources/<10 digits>.
    lay = realnode.Layout(realnode.nodeclean.NODE_DIR)
    assert len(f"{lay.socket}.ttrpc") < 104
    assert len(str(lay.kubelet_dir / "pod-resources" / "1234567890")) < 104


def test_the_real_node_says_what_it_needs_before_touching_the_host(tmp_path: Path, monkeypatch) -> None:
    import pytest

    from migops.local.binaries import Binaries

    node = realnode.RealNode(Binaries(tmp_path / "bin"), tmp_path / "owner", tmp_path / "node")
    monkeypatch.setattr(realnode.os, "geteuid", lambda: 1000)
    with pytest.raises(realnode.RealNodeError, match="needs root"):
        node.prepare()
    monkeypatch.setattr(realnode.os, "geteuid", lambda: 0)
    with pytest.raises(realnode.RealNodeError, match="missing kubelet, .* run hack/k8s-binaries.sh"):
        node.prepare()
    assert not (tmp_path / "node").exists()
