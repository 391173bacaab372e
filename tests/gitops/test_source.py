"""gitops.source against real repositories: local path, file://, branches, tags, commits, a remote that vanishes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gitrepo import CONFIG_YAML, GitRepo

from migops.gitops.repo import MAX_NODES_FILE_BYTES, RepoError, load_repo
from migops.gitops.source import GitSource, SourceError, normalise_path


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "remote")


def test_follows_a_branch_by_local_path_and_file_url(repo: GitRepo, tmp_path: Path) -> None:
    first = repo.commit({"c/config.yaml": CONFIG_YAML}, "first")
    for url in (str(repo.path), repo.url):
        src = GitSource(url, "main", cache_dir=tmp_path / "cache")
        got = src.fetch()
        assert got.revision == first and got.subject == "first"
        assert src.read_files(got.revision, ["c/config.yaml", "c/nodes.yaml"]) == {
            "c/config.yaml": CONFIG_YAML.encode(),
            "c/nodes.yaml": None,
        }
    second = repo.commit({"c/nodes.yaml": "version: v1\n"}, "second")
    again = src.fetch()
    assert again.revision == second
    # An old revision stays readable from the mirror.
    assert src.read_files(first, ["c/nodes.yaml"]) == {"c/nodes.yaml": None}
    assert src.read_files(second, ["c"]) == {"c": None}  # a directory is not a file


def test_default_ref_is_the_remote_head(repo: GitRepo, tmp_path: Path) -> None:
    sha = repo.commit({"a": "1"})
    assert GitSource(repo.url, None, cache_dir=tmp_path).fetch().revision == sha


def test_tag_and_commit_pins(repo: GitRepo, tmp_path: Path) -> None:
    first = repo.commit({"a": "1"})
    repo.tag("v1")
    second = repo.commit({"a": "2"})
    assert GitSource(repo.url, "v1", cache_dir=tmp_path).fetch().revision == first
    assert GitSource(repo.url, "refs/tags/v1", cache_dir=tmp_path).fetch().revision == first
    assert GitSource(repo.url, first, cache_dir=tmp_path).fetch().revision == first
    assert GitSource(repo.url, first[:10], cache_dir=tmp_path).fetch().revision == first
    assert GitSource(repo.url, "refs/heads/main", cache_dir=tmp_path).fetch().revision == second
    # A moved tag is followed (force-updated), like Flux does.
    repo.tag("v1", second)
    assert GitSource(repo.url, "v1", cache_dir=tmp_path).fetch().revision == second


def test_unknown_ref_and_unreachable_remote(repo: GitRepo, tmp_path: Path) -> None:
    repo.commit({"a": "1"})
    with pytest.raises(SourceError) as err:
        GitSource(repo.url, "nope", cache_dir=tmp_path).fetch()
    assert err.value.reason == "RefNotFound" and "'nope'" in str(err.value)
    src = GitSource(repo.url, "main", cache_dir=tmp_path)
    pinned = src.fetch().revision
    shutil.rmtree(repo.path)
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert err.value.reason == "GitUnreachable"
    # What was fetched before is still there to read.
    assert src.read_files(pinned, ["a"]) == {"a": b"1"}


def test_git_never_prompts_for_credentials(tmp_path: Path) -> None:
    # An https URL nobody serves: fails fast (connection refused), never waits for a password.
    src = GitSource("https://127.0.0.1:9/repo.git", "main", cache_dir=tmp_path, timeout=30)
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert err.value.reason == "GitUnreachable"


def test_a_file_past_its_bound_is_read_and_refused_by_the_loader(repo: GitRepo, tmp_path: Path) -> None:
    """Size is a verdict on the content (the loader's, which `migops validate` shares), not a failure to
    read: a commit with a nodes.yaml past its bound is invalid, not unreachable."""
    from gitrepo import CONFIG_YAML

    big = "version: v1\nassignments: []\n" + "#" * MAX_NODES_FILE_BYTES
    sha = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": big})
    src = GitSource(repo.url, "main", cache_dir=tmp_path)
    src.fetch()
    files = src.read_files(sha, ["config.yaml", "nodes.yaml"])
    assert files["nodes.yaml"] == big.encode()
    with pytest.raises(RepoError) as err:
        load_repo(files, "", sha)
    (problem,) = err.value.problems
    assert (problem.file, problem.problem.rule) == ("nodes.yaml", "nodes-file-too-large")
    assert f"the bound is {MAX_NODES_FILE_BYTES} bytes" in str(problem)


@pytest.mark.parametrize(("raw", "want"), [("", ""), (".", ""), ("./a/b/", "a/b"), ("a//b", "a/b")])
def test_normalise_path(raw: str, want: str) -> None:
    assert normalise_path(raw) == want


@pytest.mark.parametrize("raw", ["/etc", "a/../../b"])
def test_normalise_path_refuses_escapes(raw: str) -> None:
    with pytest.raises(ValueError):
        normalise_path(raw)
