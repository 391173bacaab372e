"""OCI image archives: a one-layer image from a handful of files, and an image `docker save` wrote.

The real node can pull from nowhere, so its pause image and the tests' tiny workload images are made
here from files and loaded with `ctr -n k8s.io images import`. A release ships the product image (built
by migops.local.image from the Dockerfile, saved by dockerd in Docker's own archive format) converted
here into the same form, its layers gzip-compressed as a registry stores them.

The archive is an OCI image layout in a tar (`oci-layout`, `index.json`, `blobs/sha256/...`); the index
names the image with the `io.containerd.image.name` annotation, which `ctr images import` and `docker
load` use as the image's name, and with the tag as `org.opencontainers.image.ref.name`, as containerd's
and Docker's own exports do (skopeo's `oci-archive:` reads it). Output is deterministic (fixed mtimes and
owners, gzip without a timestamp), so the same image gives the same digests.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
GZIP_LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
# zlib's default, what docker and containerd push with; 9 costs three times the CPU for 1% less. Part of a
# cached layer's name: another level is another blob.
GZIP_LEVEL = 6
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
NAME_ANNOTATION = "io.containerd.image.name"


@dataclass(frozen=True)
class File:
    """A regular file of the image (`data`), or a symlink to `link` when `link` is set."""

    data: bytes = b""
    mode: int = 0o644
    link: str | None = None


def executable(path: Path) -> File:
    """A host file copied into the image as an executable."""
    return File(path.read_bytes(), 0o755)


def layer_tar(files: Mapping[str, File]) -> bytes:
    """An uncompressed tar of `files` (image paths, leading '/' optional), parent directories included."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for name in sorted(files):
            parts = name.strip("/").split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            f = files[name]
            info = tarfile.TarInfo("/".join(parts))
            if f.link is not None:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, f.link, 0o777
                tar.addfile(info)
            else:
                info.size, info.mode = len(f.data), f.mode
                tar.addfile(info, io.BytesIO(f.data))
    return buf.getvalue()


def archive(
    name: str,
    files: Mapping[str, File],
    *,
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    env: Sequence[str] = ("PATH=/bin",),
    user: str = "",
    arch: str = "amd64",
) -> bytes:
    """The OCI archive (tar bytes) of image `name` (e.g. `migops.local/pause:1`) holding `files`."""
    layer = layer_tar(files)
    layer_digest = _digest(layer)
    config_body: dict = {"Env": list(env)}
    if entrypoint:
        config_body["Entrypoint"] = list(entrypoint)
    if cmd:
        config_body["Cmd"] = list(cmd)
    if user:
        config_body["User"] = user
    config = _json(
        {
            "architecture": arch,
            "os": "linux",
            "config": config_body,
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }
    )
    layers = [{"mediaType": LAYER_MEDIA_TYPE, "digest": layer_digest, "size": len(layer)}]
    manifest = _manifest(config, layers)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        _write_layout(
            tar, _index(name, manifest, arch), [(_digest(b), io.BytesIO(b), len(b)) for b in (layer, config, manifest)]
        )
    return out.getvalue()


def from_docker_archive(
    source: Path,
    destination: Path,
    name: str,
    annotations: Mapping[str, str] | None = None,
    *,
    layer_cache: Path | None = None,
) -> str:
    """Write the one image of `source` (a `docker save` archive) as an OCI archive at `destination`, named
    `name` (e.g. docker.io/library/migops:0.1.0), its layers gzip-compressed and `annotations` on its
    manifest; the manifest's digest (what a registry shows for it, and what a pull by digest names).
    The config is kept byte for byte: the image ID and the layers' diff IDs stay Docker's.

    With `layer_cache`, each compressed layer is kept there by its diff ID, so converting the next build
    compresses only the layers it changed (gzip is deterministic: the same blob either way); the cache
    then holds this image's layers only."""
    with contextlib.ExitStack() as stack:
        src = stack.enter_context(tarfile.open(source))
        store = layer_cache or Path(stack.enter_context(tempfile.TemporaryDirectory(dir=destination.parent)))
        store.mkdir(parents=True, exist_ok=True)
        stack.enter_context(_locked(store))
        (entry,) = json.loads(_member(src, "manifest.json"))
        config = _member(src, entry["Config"])
        image = json.loads(config)
        diff_ids = image["rootfs"]["diff_ids"]
        packed = [
            _packed(src, member, store / f"{diff_id.removeprefix('sha256:')}-gzip{GZIP_LEVEL}.tar.gz")
            for member, diff_id in zip(entry["Layers"], diff_ids, strict=True)
        ]
        descriptors = [{"mediaType": GZIP_LAYER_MEDIA_TYPE, "digest": d, "size": n} for d, _, n in packed]
        manifest = _manifest(config, descriptors, annotations)
        index = _index(name, manifest, image.get("architecture", "amd64"), image.get("os", "linux"))
        partial = destination.with_name(destination.name + ".partial")
        try:
            with tarfile.open(partial, mode="w") as tar:
                blobs: list[tuple[str, IO[bytes], int]] = [
                    (_digest(b), io.BytesIO(b), len(b)) for b in (config, manifest)
                ]
                blobs += [(d, stack.enter_context(path.open("rb")), n) for d, path, n in packed]
                _write_layout(tar, index, blobs)
            partial.replace(destination)
        finally:
            partial.unlink(missing_ok=True)
        kept = {path for _, path, _ in packed}
        for old in store.glob("*.tar.gz"):
            if old not in kept:
                old.unlink(missing_ok=True)
    return _digest(manifest)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One conversion at a time per layer cache (a release and a test may convert at once)."""
    with (directory / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _packed(tar: tarfile.TarFile, member: str, destination: Path) -> tuple[str, Path, int]:
    """The layer `member` gzip-compressed at `destination` (made when missing): (digest, path, size)."""
    if not destination.is_file():
        partial = destination.with_name(destination.name + ".partial")
        _gzip(tar, member, partial)
        partial.replace(destination)
    digest = hashlib.sha256()
    with destination.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest(), destination, destination.stat().st_size


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    f = tar.extractfile(name)
    if f is None:
        raise ValueError(f"{name}: not a file in the archive")
    return f.read()


def _gzip(tar: tarfile.TarFile, member: str, destination: Path) -> None:
    """Compress one layer of the archive into `destination`, with no name or time in the gzip header."""
    raw = tar.extractfile(member)
    if raw is None:
        raise ValueError(f"{member}: not a file in the archive")
    with destination.open("wb") as out, gzip.GzipFile("", "wb", GZIP_LEVEL, out, mtime=0) as packed:
        shutil.copyfileobj(raw, packed, 1 << 20)


def _manifest(
    config: bytes, layers: Sequence[Mapping[str, object]], annotations: Mapping[str, str] | None = None
) -> bytes:
    body: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": _digest(config), "size": len(config)},
        "layers": list(layers),
    }
    if annotations:
        body["annotations"] = dict(annotations)
    return _json(body)


def _index(name: str, manifest: bytes, arch: str, os: str = "linux") -> bytes:
    return _json(
        {
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [
                {
                    "mediaType": MANIFEST_MEDIA_TYPE,
                    "digest": _digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": arch, "os": os},
                    "annotations": {
                        NAME_ANNOTATION: name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
    )


def _write_layout(tar: tarfile.TarFile, index: bytes, blobs: Sequence[tuple[str, IO[bytes], int]]) -> None:
    """The image layout's files into `tar`: `oci-layout`, `index.json`, then each blob (digest, content, size)."""
    for d in ("blobs", "blobs/sha256"):
        info = tarfile.TarInfo(d)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    layout = _json({"imageLayoutVersion": "1.0.0"})
    files: list[tuple[str, IO[bytes], int]] = [("oci-layout", io.BytesIO(layout), len(layout))]
    files.append(("index.json", io.BytesIO(index), len(index)))
    files += [(f"blobs/sha256/{d.removeprefix('sha256:')}", body, size) for d, body, size in blobs]
    for path, body, size in files:
        info = tarfile.TarInfo(path)
        info.size, info.mode = size, 0o644
        tar.addfile(info, body)


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _digest(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()
