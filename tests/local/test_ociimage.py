"""A `docker save` archive converted into an OCI image archive (what a release ships): the config kept byte
for byte, each layer gzip-compressed under the digest of what it holds, the name and tag where ctr,
docker load and skopeo look for them, and the same bytes every time."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

from migops.local import ociimage

NAME = "docker.io/library/migops:9.8.7"


def _sha(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def _docker_archive(path: Path) -> tuple[bytes, list[bytes]]:
    """A `docker save` archive as dockerd 20.10 writes it: manifest.json, the config, one dir per layer."""
    layers = [
        ociimage.layer_tar({"etc/os-release": ociimage.File(b"ID=test\n")}),
        ociimage.layer_tar({"opt/migops/bin/migops": ociimage.File(b"#!/bin/sh\n" * 5000, 0o755)}),
    ]
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Labels": {"org.opencontainers.image.version": "9.8.7"}, "User": "65532:65532"},
            "rootfs": {"type": "layers", "diff_ids": [_sha(layer) for layer in layers]},
        }
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = [
        {
            "Config": config_name,
            "RepoTags": ["migops:9.8.7"],
            "Layers": [f"{i}{'a' * 63}/layer.tar" for i in range(len(layers))],
        }
    ]
    with tarfile.open(path, "w") as tar:
        members = [("manifest.json", json.dumps(manifest).encode()), (config_name, config)]
        members += [(name, body) for name, body in zip(manifest[0]["Layers"], layers)]
        for name, body in members:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return config, layers


def _read(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_a_docker_archive_becomes_an_oci_archive_of_the_same_image(tmp_path: Path) -> None:
    config, layers = _docker_archive(tmp_path / "saved.tar")
    out = tmp_path / "image.oci.tar"
    annotations = {"org.opencontainers.image.version": "9.8.7", "org.opencontainers.image.revision": "abc"}
    digest = ociimage.from_docker_archive(tmp_path / "saved.tar", out, NAME, annotations)

    files = _read(out)
    for name, body in files.items():
        if name.startswith("blobs/sha256/"):
            assert name.removeprefix("blobs/sha256/") == hashlib.sha256(body).hexdigest(), name
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["digest"] == digest and entry["platform"] == {"architecture": "amd64", "os": "linux"}
    assert entry["annotations"] == {ociimage.NAME_ANNOTATION: NAME, "org.opencontainers.image.ref.name": "9.8.7"}

    manifest = json.loads(files[f"blobs/sha256/{digest.removeprefix('sha256:')}"])
    assert manifest["mediaType"] == ociimage.MANIFEST_MEDIA_TYPE and manifest["annotations"] == annotations
    assert manifest["config"]["digest"] == _sha(config)  # the image ID is Docker's
    assert files[f"blobs/sha256/{_sha(config)[7:]}"] == config
    assert len(manifest["layers"]) == len(layers)
    for descriptor, layer in zip(manifest["layers"], layers):
        blob = files[f"blobs/sha256/{descriptor['digest'][7:]}"]
        assert descriptor["mediaType"] == ociimage.GZIP_LAYER_MEDIA_TYPE and descriptor["size"] == len(blob)
        assert gzip.decompress(blob) == layer and len(blob) < len(layer)
    assert json.loads(config)["rootfs"]["diff_ids"] == [_sha(layer) for layer in layers]

    again = tmp_path / "again.oci.tar"
    assert ociimage.from_docker_archive(tmp_path / "saved.tar", again, NAME, annotations) == digest
    assert again.read_bytes() == out.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.oci.tar", "image.oci.tar", "saved.tar"]


def test_a_layer_cache_compresses_only_the_layers_a_build_changed(tmp_path: Path) -> None:
    _docker_archive(tmp_path / "saved.tar")
    cache = tmp_path / "cache"
    plain = ociimage.from_docker_archive(tmp_path / "saved.tar", tmp_path / "plain.oci.tar", NAME)
    cached = ociimage.from_docker_archive(tmp_path / "saved.tar", tmp_path / "a.oci.tar", NAME, layer_cache=cache)
    assert cached == plain and (tmp_path / "a.oci.tar").read_bytes() == (tmp_path / "plain.oci.tar").read_bytes()
    first = {p.name: p.stat().st_mtime_ns for p in cache.glob("*.tar.gz")}
    assert len(first) == 2

    # The next build changes its top layer: the base layer's blob is reused, the old top one dropped.
    saved = tmp_path / "saved.tar"
    with tarfile.open(saved) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    (entry,) = json.loads(members["manifest.json"])
    top = ociimage.layer_tar({"opt/migops/bin/migops": ociimage.File(b"#!/bin/sh\necho 2\n", 0o755)})
    config = json.loads(members[entry["Config"]])
    config["rootfs"]["diff_ids"][1] = _sha(top)
    members[entry["Config"]] = json.dumps(config).encode()
    members[entry["Layers"][1]] = top
    with tarfile.open(saved, "w") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    again = ociimage.from_docker_archive(saved, tmp_path / "b.oci.tar", NAME, layer_cache=cache)
    assert again != cached
    second = {p.name: p.stat().st_mtime_ns for p in cache.glob("*.tar.gz")}
    base = f"{config['rootfs']['diff_ids'][0].removeprefix('sha256:')}-gzip6.tar.gz"
    assert set(second) == {base, f"{_sha(top).removeprefix('sha256:')}-gzip6.tar.gz"}
    assert second[base] == first[base]  # not compressed again
    assert not list(tmp_path.glob("*.partial")) and not list(cache.glob("*.partial"))
