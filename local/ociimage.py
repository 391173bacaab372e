"""Write a one-layer OCI image archive from a handful of files: images with no registry and no builder.

The real node can pull from nowhere, so its pause image and the tests' tiny workload images are made
here and loaded with `ctr -n k8s.io images import`. The archive is an OCI image layout in a tar
(`oci-layout`, `index.json`, `blobs/sha256/...`); the index names the image with the
`io.containerd.image.name` annotation, which `ctr images import` uses as the image's name. Output is
deterministic (fixed mtimes and owners), so the same files give the same image ID.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
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
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": _digest(config), "size": len(config)},
            "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": layer_digest, "size": len(layer)}],
        }
    )
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [
                {
                    "mediaType": MANIFEST_MEDIA_TYPE,
                    "digest": _digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": arch, "os": "linux"},
                    "annotations": {
                        NAME_ANNOTATION: name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
    )
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        entries = [("oci-layout", _json({"imageLayoutVersion": "1.0.0"})), ("index.json", index)]
        entries += [(f"blobs/sha256/{_digest(b)[7:]}", b) for b in (layer, config, manifest)]
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, body in entries:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(body), 0o644
            tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _digest(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()
