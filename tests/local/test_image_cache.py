"""`migops local image` skips the build when the saved archive was built from this very context
(migops.local.image.context_key): what `make test` relies on to build the image once, not once per
module that deploys it. No Docker here: the key's inputs, and a cache hit that builds nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from migops.local import image

ROOT = Path(__file__).resolve().parents[2]


def _tree(dest: Path) -> Path:
    """A repository in miniature: the Dockerfile, .dockerignore and pyproject.toml of this one, a package
    folder, its link under migops/, and a tests/ folder the context leaves out."""
    dest.mkdir()
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "requirements.lock"):
        shutil.copy2(ROOT / name, dest / name)
    (dest / "mig").mkdir()
    (dest / "mig" / "fit.py").write_text("X = 1\n")
    (dest / "migops").mkdir()
    (dest / "migops" / "mig").symlink_to("../mig")
    (dest / "tests").mkdir()
    (dest / "tests" / "test_x.py").write_text("def test(): pass\n")
    return dest


def test_the_key_follows_the_build_context_only(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "repo")
    key = image.context_key(tree)
    assert len(key) == 64 and image.context_key(tree) == key
    (tree / "tests" / "test_x.py").write_text("def test(): assert 0\n")  # not in the context
    (tree / "mig" / "__pycache__").mkdir()
    (tree / "mig" / "__pycache__" / "fit.cpython-311.pyc").write_bytes(b"\0")  # left out by .dockerignore
    assert image.context_key(tree) == key
    (tree / "mig" / "fit.py").write_text("X = 2\n")  # the package's code
    changed = image.context_key(tree)
    assert changed != key
    (tree / "mig" / "fit.py").chmod(0o755)  # Docker copies the mode too
    assert image.context_key(tree) not in (key, changed)
    (tree / "requirements.lock").write_text("# another lock\n")
    assert image.context_key(tree) not in (key, changed)
    # A .dockerignore of another shape than the allowlist the key reads: never cached.
    (tree / ".dockerignore").write_text((tree / ".dockerignore").read_text() + "mig/secret\n")
    assert image.context_key(tree) == ""


def test_a_saved_archive_of_the_same_context_is_not_rebuilt(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "repo")
    cache = tmp_path / "cache"
    cache.mkdir()
    archive = cache / f"migops-{image.version(tree)}.tar"
    archive.write_bytes(b"saved before")
    st = archive.stat()
    stamp = {"key": image.context_key(tree), "size": 123, "archive": [st.st_ino, st.st_size, st.st_mtime_ns]}
    (cache / archive.with_suffix(".key").name).write_text(json.dumps(stamp))
    lines: list[str] = []
    built = image.build(tree, cache=cache, log=lines.append)
    assert built == image.Built(image.reference(tree), archive, 123, 0.0, 0.0)
    assert archive.read_bytes() == b"saved before" and "not rebuilt" in lines[0]
    # Nothing was started or made: no base rootfs, no dockerd data.
    assert sorted(p.name for p in cache.iterdir()) == sorted([".lock", archive.name, archive.with_suffix(".key").name])


def test_an_archive_replaced_since_its_stamp_is_not_trusted(tmp_path: Path) -> None:
    """Another build (older code keeps no stamp) replaced the archive: the stamp no longer describes it,
    so `build` would really build (`saved` is what it asks first)."""
    tree = _tree(tmp_path / "repo")
    cache = tmp_path / "cache"
    cache.mkdir()
    archive = cache / f"migops-{image.version(tree)}.tar"
    archive.write_bytes(b"saved before")
    st = archive.stat()
    stamp = {"key": image.context_key(tree), "size": 123, "archive": [st.st_ino, st.st_size, st.st_mtime_ns]}
    (cache / archive.with_suffix(".key").name).write_text(json.dumps(stamp))
    assert image.saved(tree, cache) == image.Built(image.reference(tree), archive, 123, 0.0, 0.0)
    replaced = archive.with_suffix(".partial")
    replaced.write_bytes(b"another tree's image")
    replaced.replace(archive)
    assert image.saved(tree, cache) is None
