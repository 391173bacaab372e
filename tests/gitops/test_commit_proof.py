"""A commit kept outside git (the cluster's applied record): its signature, and that its trees lead from
the signed revision to exactly the kept files, checked with real git and real SSH signatures."""

from __future__ import annotations

from pathlib import Path

import pytest
from gitrepo import CONFIG_YAML, GitRepo, SshKey, nodes_yaml

from migops.api.migsync import TrustPolicy
from migops.gitops.desired import DesiredState
from migops.gitops.repo import load_repo
from migops.gitops.source import GitSource
from migops.gitops.verify import CommitProof, VerificationError, verify_files
from migops.reconciler.record import from_configmap, record_of, to_configmap, verify_record

NODES = nodes_yaml("  - nodeSelector: {matchLabels: {pool: a}}\n    config: all-1g.10gb")
OTHER = nodes_yaml("  - nodeSelector: {matchLabels: {pool: a}}\n    config: all-7g.80gb")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SshKey]:
    d = tmp_path_factory.mktemp("keys")
    return {"alice": SshKey.make(d, "alice"), "mallory": SshKey.make(d, "mallory")}


def _trust(key: SshKey) -> TrustPolicy:
    return TrustPolicy("head", allowed_signers=key.allowed_signers)


def _files(nodes: str = NODES) -> dict[str, bytes]:
    return {"config.yaml": CONFIG_YAML.encode(), "nodes.yaml": nodes.encode()}


def _proof(tmp_path: Path, repo: GitRepo, sha: str, path: str) -> CommitProof:
    src = GitSource(repo.url, "main", cache_dir=tmp_path / "cache")
    src.fetch()
    return CommitProof(src.commit_object(sha), src.path_trees(sha, path))


@pytest.mark.parametrize("path", ["", "clusters/prod"])
def test_the_signed_commits_own_files_verify(tmp_path: Path, keys: dict[str, SshKey], path: str) -> None:
    repo = GitRepo(tmp_path / "remote")
    where = f"{path}/" if path else ""
    sha = repo.commit(
        {f"{where}config.yaml": CONFIG_YAML, f"{where}nodes.yaml": NODES, "README": "x"}, key=keys["alice"]
    )
    proof = _proof(tmp_path, repo, sha, path)
    assert len(proof.trees) == 1 + len([p for p in path.split("/") if p])
    signer = verify_files(proof, sha, path, _files(), _trust(keys["alice"]))
    assert signer is not None and signer.identity == "alice@example.com"


def test_other_files_another_commit_or_another_key_are_refused(tmp_path: Path, keys: dict[str, SshKey]) -> None:
    repo = GitRepo(tmp_path / "remote")
    first = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": NODES}, key=keys["alice"])
    second = repo.commit({"nodes.yaml": OTHER}, key=keys["alice"])
    alice = _trust(keys["alice"])
    proof = _proof(tmp_path, repo, first, "")
    # The files of a later commit under the first commit's signature: nodes.yaml is not its blob.
    with pytest.raises(VerificationError, match=r"nodes.yaml as kept is not the file commit \w{12} holds \(that is"):
        verify_files(proof, first, "", _files(OTHER), alice)
    # The first commit's object claimed as another revision.
    with pytest.raises(VerificationError, match=r"the commit object kept for \w{12} is another commit"):
        verify_files(proof, second, "", _files(), alice)
    # Another commit's trees under this commit: they do not lead from it to the files.
    later = _proof(tmp_path, repo, second, "")
    with pytest.raises(VerificationError, match="its trees do not lead there"):
        verify_files(CommitProof(proof.commit, later.trees), first, "", _files(), alice)
    # Another directory than the one the files were kept for.
    with pytest.raises(VerificationError, match="its trees do not lead there"):
        verify_files(proof, first, "elsewhere", _files(), alice)
    # A genuine commit and its files, signed by a key nobody listed.
    evil = repo.commit({"nodes.yaml": OTHER}, key=keys["mallory"])
    with pytest.raises(VerificationError, match="not in the allowed signers"):
        verify_files(_proof(tmp_path, repo, evil, ""), evil, "", _files(OTHER), alice)
    # Unsigned.
    plain = repo.commit({"nodes.yaml": NODES})
    with pytest.raises(VerificationError, match="is not signed"):
        verify_files(_proof(tmp_path, repo, plain, ""), plain, "", _files(), alice)


def test_the_record_keeps_its_proof_and_verifies_only_with_it(tmp_path: Path, keys: dict[str, SshKey]) -> None:
    repo = GitRepo(tmp_path / "remote")
    sha = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": NODES}, key=keys["alice"])
    spec = load_repo(_files(), "", sha)
    desired = DesiredState(spec, "mixed", "gpu-operator", "default-mig-parted-config", {})
    kept = record_of(desired, 1.0, _proof(tmp_path, repo, sha, ""))
    read = from_configmap(to_configmap(kept, "migops-system", "migops", None))
    assert read == kept and read.proof is not None
    verify_record(read, _trust(keys["alice"]))  # the genuine record
    with pytest.raises(VerificationError, match="not in the allowed signers"):
        verify_record(read, _trust(keys["mallory"]))
    # The same record without its proof (an old one, or one written by hand): refused with signatures
    # required, taken as it is without.
    bare = record_of(desired, 1.0)
    bare = from_configmap(to_configmap(bare, "migops-system", "migops", None))
    assert bare.proof is None
    with pytest.raises(VerificationError, match="holds no signed commit object"):
        verify_record(bare, _trust(keys["alice"]))
    verify_record(bare, TrustPolicy())
