"""The loopback git server Flux fetches from (migops.local.gitserver): real git over HTTP, and garbage
answered with a 4xx, never a 500 or a hang."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path

import pytest
from gitrepo import run

from migops.local import gitserver
from migops.local.process import find_by_argument, stop


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    root = tmp_path / "root"
    bare = gitserver.init_bare(root, "repo")
    gitserver.commit(bare, {"a/config.yaml": "version: v1\n"}, "first")
    popen, ref, base = gitserver.start(root, tmp_path / "git.log", probe="repo")
    try:
        yield bare, base
    finally:
        stop(ref, popen=popen)
    assert not find_by_argument(gitserver.identifying_arguments(root)[0])


def test_clone_push_and_fetch_over_http(served: tuple[Path, str], tmp_path: Path) -> None:
    bare, base = served
    work = tmp_path / "w"
    run(["git", "clone", "-q", f"{base}/repo.git", str(work)])
    assert (work / "a" / "config.yaml").read_text() == "version: v1\n"
    (work / "big").write_bytes(b"x" * (3 << 20))  # over git's 1 MiB postBuffer: a chunked push
    run(["git", "-C", str(work), "add", "-A"])
    run(["git", "-C", str(work), "-c", "commit.gpgsign=false", "commit", "-q", "-m", "second"])
    run(["git", "-C", str(work), "push", "-q", "origin", "HEAD:main"])
    assert gitserver.head(bare) == run(["git", "-C", str(work), "rev-parse", "HEAD"]).strip()
    listed = run(["git", "ls-remote", f"{base}/repo.git"])
    assert gitserver.head(bare) in listed


def _request(
    base: str, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> int:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "expected"),
    [
        ("GET", "/../../etc/passwd", {}, None, 404),
        ("GET", "/repo.git/../../x", {}, None, 404),
        ("GET", "/missing.git/info/refs?service=git-upload-pack", {}, None, 404),
        ("PUT", "/repo.git/info/refs", {}, b"x", 405),
        ("POST", "/repo.git/git-upload-pack", {"Content-Length": str(gitserver.MAX_BODY + 1)}, b"", 413),
        ("POST", "/repo.git/git-upload-pack", {"Content-Length": "nonsense"}, b"", 400),
        ("POST", "/repo.git/git-upload-pack", {"Transfer-Encoding": "chunked"}, b"zz\r\n", 400),
    ],
    ids=["dotdot", "dotdot-inside", "no-repo", "put", "too-big", "bad-length", "bad-chunk"],
)
def test_garbage_is_a_4xx(
    served: tuple[Path, str], method: str, path: str, headers: dict[str, str], body: bytes | None, expected: int
) -> None:
    assert _request(served[1], method, path, body, headers) == expected


def test_git_is_required_to_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="git is not on PATH"):
        gitserver.init_bare(tmp_path, "r")
