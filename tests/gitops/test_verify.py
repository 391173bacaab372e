"""Commit signatures: SSH (allowed signers) and OpenPGP; unsigned, untrusted and tampered commits refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from gitrepo import GitRepo, PgpKey, SshKey

from migops.api.migsync import TrustPolicy
from migops.gitops.source import GitSource
from migops.gitops.verify import VerificationError, split_signature, verify_commit


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SshKey | PgpKey]]:
    d = tmp_path_factory.mktemp("keys")
    made = {
        "ssh": SshKey.make(d, "alice"),
        "ssh-other": SshKey.make(d, "mallory"),
        "pgp": PgpKey.make(d, "alice"),
        "pgp-other": PgpKey.make(d, "mallory"),
    }
    yield made
    for key in made.values():
        if isinstance(key, PgpKey):
            key.close()


def _commit(tmp_path: Path, key: SshKey | PgpKey | None) -> tuple[bytes, str]:
    repo = GitRepo(tmp_path / "remote")
    sha = repo.commit({"a": "1"}, key=key)
    src = GitSource(repo.url, "main", cache_dir=tmp_path / "cache")
    src.fetch()
    return src.commit_object(sha), sha


def _ssh_policy(key: SshKey) -> TrustPolicy:
    return TrustPolicy("head", allowed_signers=key.allowed_signers)


def test_ssh_signed_by_a_trusted_key(tmp_path: Path, keys: dict) -> None:
    commit, sha = _commit(tmp_path, keys["ssh"])
    signer = verify_commit(commit, sha, _ssh_policy(keys["ssh"]))
    assert signer is not None and signer.method == "ssh" and signer.identity == "alice@example.com"


def test_ssh_signed_by_an_untrusted_key(tmp_path: Path, keys: dict) -> None:
    commit, sha = _commit(tmp_path, keys["ssh-other"])
    with pytest.raises(VerificationError, match="not in the allowed signers .key SHA256:"):
        verify_commit(commit, sha, _ssh_policy(keys["ssh"]))


def test_unsigned_commit_is_refused_and_allowed_without_verification(tmp_path: Path, keys: dict) -> None:
    commit, sha = _commit(tmp_path, None)
    with pytest.raises(VerificationError, match="is not signed"):
        verify_commit(commit, sha, _ssh_policy(keys["ssh"]))
    assert verify_commit(commit, sha, TrustPolicy()) is None


def test_tampered_commit_fails_its_signature(tmp_path: Path, keys: dict) -> None:
    commit, sha = _commit(tmp_path, keys["ssh"])
    forged = commit.replace(b"\n\nchange", b"\n\nchangE")
    assert forged != commit
    with pytest.raises(VerificationError, match="bad SSH signature"):
        verify_commit(forged, sha, _ssh_policy(keys["ssh"]))


def test_openpgp_trusted_untrusted_and_wrong_kind(tmp_path: Path, keys: dict) -> None:
    commit, sha = _commit(tmp_path, keys["pgp"])
    signer = verify_commit(commit, sha, TrustPolicy("head", openpgp_keys=(keys["pgp"].armored,)))
    assert signer is not None and signer.method == "openpgp" and signer.identity == keys["pgp"].fingerprint
    with pytest.raises(VerificationError, match="OpenPGP key that is not trusted"):
        verify_commit(commit, sha, TrustPolicy("head", openpgp_keys=(keys["pgp-other"].armored,)))
    with pytest.raises(VerificationError, match="no OpenPGP keys are configured"):
        verify_commit(commit, sha, _ssh_policy(keys["ssh"]))
    forged = commit.replace(b"\n\nchange", b"\n\nchangE")
    with pytest.raises(VerificationError, match="bad signature"):
        verify_commit(forged, sha, TrustPolicy("head", openpgp_keys=(keys["pgp"].armored,)))


def test_split_signature_payload_is_what_git_signs(tmp_path: Path, keys: dict) -> None:
    commit, _ = _commit(tmp_path, keys["ssh"])
    payload, sig = split_signature(commit)  # type: ignore[misc]
    assert sig.startswith(b"-----BEGIN SSH SIGNATURE-----") and sig.endswith(b"-----END SSH SIGNATURE-----\n")
    assert b"gpgsig" not in payload and payload.endswith(b"\n\nchange\n")
    assert split_signature(payload) is None


def test_policy_needs_keys() -> None:
    with pytest.raises(ValueError, match="needs trusted keys"):
        TrustPolicy("head")
    with pytest.raises(ValueError, match="mode"):
        TrustPolicy("always")  # type: ignore[arg-type]
