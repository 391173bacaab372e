"""Is a commit signed by a key we trust? SSH signatures (allowed-signers) and OpenPGP.

`git verify-commit` alone is not enough: with SSH signatures it accepts a good signature by a key that
is in no allowed-signers file unless gpg.minTrustLevel is raised, and with OpenPGP it depends on a
keyring's owner trust. So the signature is taken out of the commit object here and checked with the
tools that define the formats, each told to trust exactly the configured keys:
`ssh-keygen -Y find-principals` + `ssh-keygen -Y verify -n git` against the allowed-signers text, and
`gpgv` against a keyring made from the configured armored public keys (every key in it is trusted, as
in Flux's verification). Anything else (unsigned, bad signature, unknown key, expired or revoked key)
is a VerificationError: the commit is never applied.

`verify_files` checks a copy kept outside git (the cluster's applied record): the signed commit object
and the tree objects from its root to the files' directory, re-hashed by git itself in a scratch
repository, must lead from the signed revision to exactly the recorded files.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from migops.api.migsync import TrustPolicy
from migops.gitops.reasons import SourceReason

_SSH_ARMOR = b"-----BEGIN SSH SIGNATURE-----"
_PGP_ARMOR = b"-----BEGIN PGP SIGNATURE-----"
_SIG_HEADERS = (b"gpgsig", b"gpgsig-sha256")


class VerificationError(Exception):
    """The commit must not be applied: unsigned, badly signed, or signed by a key nobody trusts."""

    reason = SourceReason.VERIFICATION_FAILED


@dataclass(frozen=True)
class Signer:
    method: Literal["ssh", "openpgp"]
    identity: str  # SSH principal, or OpenPGP key fingerprint

    def __str__(self) -> str:
        return f"{self.method} {self.identity}"


def split_signature(commit: bytes) -> tuple[bytes, bytes] | None:
    """(payload, signature) of a raw commit object; None when it carries no signature.

    The payload is the object without its gpgsig header (and that header's continuation lines),
    exactly what git hands the signing program.
    """
    head, sep, message = commit.partition(b"\n\n")
    payload_lines: list[bytes] = []
    signature: list[bytes] = []
    in_sig = False
    for line in head.split(b"\n"):
        if in_sig and line.startswith(b" "):
            signature.append(line[1:])
            continue
        in_sig = False
        name = line.split(b" ", 1)[0]
        if name in _SIG_HEADERS:
            if name == b"gpgsig" or not signature:
                signature = [line[len(name) + 1 :]]
                in_sig = True
            continue
        payload_lines.append(line)
    if not signature:
        return None
    return b"\n".join(payload_lines) + sep + message, b"\n".join(signature) + b"\n"


def verify_commit(commit: bytes, revision: str, policy: TrustPolicy) -> Signer | None:
    """Check the commit against the policy; None when verification is off. Raises VerificationError."""
    if not policy.enabled:
        return None
    split = split_signature(commit)
    short = revision[:12]
    if split is None:
        raise VerificationError(f"commit {short} is not signed; verification requires a signature by a trusted key")
    payload, signature = split
    with tempfile.TemporaryDirectory(prefix="migops-verify-") as tmp:
        work = Path(tmp)
        (work / "payload").write_bytes(payload)
        (work / "sig").write_bytes(signature)
        if signature.startswith(_SSH_ARMOR):
            return _verify_ssh(work, short, policy)
        if signature.startswith(_PGP_ARMOR):
            return _verify_openpgp(work, short, policy)
    raise VerificationError(f"commit {short} carries a signature of an unknown kind (neither SSH nor OpenPGP)")


def _run(argv: list[str], stdin: bytes = b"", cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, timeout=30, cwd=cwd, check=False)
    except FileNotFoundError:
        raise VerificationError(f"{argv[0]} is not installed; it is needed to verify signatures") from None


def _verify_ssh(work: Path, short: str, policy: TrustPolicy) -> Signer:
    if not policy.allowed_signers.strip():
        raise VerificationError(f"commit {short} has an SSH signature but no SSH allowed signers are configured")
    signers = work / "allowed_signers"
    signers.write_text(
        policy.allowed_signers if policy.allowed_signers.endswith("\n") else policy.allowed_signers + "\n"
    )
    found = _run(["ssh-keygen", "-Y", "find-principals", "-s", str(work / "sig"), "-f", str(signers)])
    principals = [p for p in found.stdout.decode(errors="replace").splitlines() if p.strip()]
    if found.returncode != 0 or not principals:
        key = _ssh_key_of(work)
        raise VerificationError(
            f"commit {short} is signed by an SSH key that is not in the allowed signers" + (f" ({key})" if key else "")
        )
    payload = (work / "payload").read_bytes()
    errors = []
    for principal in principals:
        checked = _run(
            ["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", principal, "-n", "git", "-s", str(work / "sig")],
            payload,
        )
        if checked.returncode == 0:
            return Signer("ssh", principal)
        errors.append(
            checked.stderr.decode(errors="replace").strip() or checked.stdout.decode(errors="replace").strip()
        )
    raise VerificationError(f"commit {short}: bad SSH signature ({'; '.join(errors)})")


def _ssh_key_of(work: Path) -> str:
    """The fingerprint of the key that made the signature, for the message only (not a check)."""
    out = _run(
        ["ssh-keygen", "-Y", "check-novalidate", "-n", "git", "-s", str(work / "sig")], (work / "payload").read_bytes()
    )
    text = (out.stdout + out.stderr).decode(errors="replace")
    for word in text.split():
        if word.startswith("SHA256:"):
            return "key " + word
    return ""


def _verify_openpgp(work: Path, short: str, policy: TrustPolicy) -> Signer:
    if not policy.openpgp_keys:
        raise VerificationError(f"commit {short} has an OpenPGP signature but no OpenPGP keys are configured")
    home = work / "gnupg"
    home.mkdir(mode=0o700)
    keyring = work / "trusted.gpg"
    with keyring.open("wb") as out:
        for i, armored in enumerate(policy.openpgp_keys):
            (work / f"key{i}.asc").write_text(armored)
            binary = _run(
                ["gpg", "--batch", "--homedir", str(home), "--dearmor", "--output", "-", str(work / f"key{i}.asc")]
            )
            if binary.returncode != 0 or not binary.stdout:
                raise VerificationError(
                    f"trusted OpenPGP key #{i + 1} is not an armored public key: "
                    f"{binary.stderr.decode(errors='replace').strip()}"
                )
            out.write(binary.stdout)
    checked = _run(
        [
            "gpgv",
            "--homedir",
            str(home),
            "--keyring",
            str(keyring),
            "--status-fd",
            "1",
            str(work / "sig"),
            str(work / "payload"),
        ]
    )
    status = checked.stdout.decode(errors="replace").splitlines()
    words = {
        line.split()[1]: line.split()[2:] for line in status if line.startswith("[GNUPG:] ") and len(line.split()) > 1
    }
    for bad, why in (
        ("EXPKEYSIG", "by an expired key"),
        ("REVKEYSIG", "by a revoked key"),
        ("BADSIG", "with a bad signature"),
        ("EXPSIG", "with an expired signature"),
    ):
        if bad in words:
            raise VerificationError(f"commit {short} is signed {why} ({' '.join(words[bad][:1])})")
    if checked.returncode == 0 and "GOODSIG" in words and "VALIDSIG" in words:
        return Signer("openpgp", words["VALIDSIG"][0])
    if "NO_PUBKEY" in words or "ERRSIG" in words:
        key = (words.get("NO_PUBKEY") or words.get("ERRSIG") or ["?"])[0]
        raise VerificationError(f"commit {short} is signed by an OpenPGP key that is not trusted (key {key})")
    raise VerificationError(
        f"commit {short}: OpenPGP signature not verified ({checked.stderr.decode(errors='replace').strip()[:300]})"
    )


@dataclass(frozen=True)
class CommitProof:
    """What ties files to a signed revision without its repository: the raw commit object (signature
    included) and the raw tree objects from its root tree down to the files' directory."""

    commit: bytes
    trees: tuple[bytes, ...]


def verify_files(
    proof: CommitProof, revision: str, path: str, files: Mapping[str, bytes], policy: TrustPolicy
) -> Signer | None:
    """Is each of `files` (name -> content, in directory `path`) what signed commit `revision` holds?
    The signature is checked as for a fetched commit; then git hashes the objects: the commit object
    must be `revision`, its trees must lead to `path`, and the blobs there must be `files`.
    Raises VerificationError."""
    signer = verify_commit(proof.commit, revision, policy)
    short = revision[:12]
    with tempfile.TemporaryDirectory(prefix="migops-proof-") as tmp:
        git = _scratch_git(Path(tmp), "sha256" if len(revision) == 64 else "sha1")
        made = git(["hash-object", "-w", "-t", "commit", "--stdin"], proof.commit).strip()
        if made != revision:
            raise VerificationError(f"the commit object kept for {short} is another commit ({made[:12]})")
        for tree in proof.trees:
            git(["hash-object", "-w", "-t", "tree", "--stdin"], tree)
        blobs = {n: git(["hash-object", "-w", "-t", "blob", "--stdin"], files[n]).strip() for n in files}
        # The tree entries alone name the blobs: ls-tree reads the trees, never the blobs.
        top = f"{revision}:{path}" if path else f"{revision}^{{tree}}"
        try:
            listing: str | None = git(["ls-tree", "-z", top, "--", *sorted(files)], b"")
        except VerificationError:
            listing = None
        entries: dict[str, str] = {}  # name -> object id ("<mode> <type> <id>\t<name>")
        for entry in (listing or "").split("\0"):
            if "\t" in entry:
                meta, name = entry.split("\t", 1)
                entries[name] = meta.split(" ")[-1]
        for name in sorted(files):
            shown = f"{path}/{name}" if path else name
            if listing is None or name not in entries:
                raise VerificationError(
                    f"{shown} as kept is not the file commit {short} holds (its trees do not lead there)"
                )
            if entries[name] != blobs[name]:
                raise VerificationError(
                    f"{shown} as kept is not the file commit {short} holds (that is blob {entries[name][:12]})"
                )
    return signer


def _scratch_git(where: Path, object_format: str) -> Callable[[list[str], bytes], str]:
    """A bare repository of its own, for git to hash and look up objects in; no config but its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")

    def git(args: list[str], stdin: bytes = b"") -> str:
        try:
            out = subprocess.run(
                ["git", "-C", str(where), *args], input=stdin, capture_output=True, timeout=30, env=env, check=False
            )
        except FileNotFoundError:
            raise VerificationError("git is not installed; it is needed to check a kept commit") from None
        if out.returncode != 0:
            raise VerificationError(f"git {args[0]} refused a kept object: {out.stderr.decode(errors='replace')[:300]}")
        return out.stdout.decode(errors="replace")

    git(["init", "--bare", "-q", f"--object-format={object_format}", "."])
    return git
