"""Real git repositories for tests: commits, tags, SSH- and OpenPGP-signed commits.

Importable from any test (pytest puts tests/ on sys.path for the root conftest). Signing keys are made
fresh per key object; an OpenPGP key's gpg-agent is stopped by `close()`.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def run(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, **_ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {out.stderr}")
    return out.stdout


@dataclass
class SshKey:
    path: Path  # private key; .pub beside it
    principal: str = "signer@example.com"

    @classmethod
    def make(cls, directory: Path, name: str = "signer") -> SshKey:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / name
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)])
        return cls(path, f"{name}@example.com")

    @property
    def allowed_signers(self) -> str:
        return f'{self.principal} namespaces="git" {Path(str(self.path) + ".pub").read_text().strip()}\n'

    def git_config(self) -> list[str]:
        return ["-c", "gpg.format=ssh", "-c", f"user.signingkey={self.path}"]


@dataclass
class PgpKey:
    home: Path
    fingerprint: str

    @classmethod
    def make(cls, directory: Path, name: str = "signer") -> PgpKey:
        home = directory / f"gnupg-{name}"
        home.mkdir(parents=True, mode=0o700)
        env = {"GNUPGHOME": str(home)}
        run(
            [
                "gpg",
                "--batch",
                "--passphrase",
                "",
                "--pinentry-mode",
                "loopback",
                "--quick-gen-key",
                f"{name} <{name}@example.com>",
                "ed25519",
                "sign",
                "never",
            ],
            env=env,
        )
        listing = run(["gpg", "--batch", "--with-colons", "--list-secret-keys"], env=env)
        fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        return cls(home, fpr)

    @property
    def armored(self) -> str:
        return run(["gpg", "--batch", "--armor", "--export", self.fingerprint], env={"GNUPGHOME": str(self.home)})

    def git_config(self) -> list[str]:
        return ["-c", "gpg.format=openpgp", "-c", f"user.signingkey={self.fingerprint}"]

    def close(self) -> None:
        subprocess.run(
            ["gpgconf", "--kill", "gpg-agent"],
            env={**os.environ, "GNUPGHOME": str(self.home)},
            capture_output=True,
            timeout=30,
            check=False,
        )


class GitRepo:
    """A non-bare repository on branch main that tests commit to; its path is a fetchable URL."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        run(["git", "init", "-q", "-b", "main", str(path)])
        self.git("config", "commit.gpgsign", "false")

    @property
    def url(self) -> str:
        return f"file://{self.path}"

    def git(self, *args: str, env: dict[str, str] | None = None) -> str:
        return run(["git", "-C", str(self.path), *args], env=env)

    def commit(
        self, files: dict[str, str | None], message: str = "change", *, key: SshKey | PgpKey | None = None
    ) -> str:
        """Write (or, for None, delete) files, commit them (signed with `key`), return the SHA."""
        for name, text in files.items():
            target = self.path / name
            if text is None:
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self.git("add", "-A")
        env = {"GNUPGHOME": str(key.home)} if isinstance(key, PgpKey) else None
        if key is None:
            self.git("commit", "-q", "--allow-empty", "-m", message)
        else:
            run(
                ["git", "-C", str(self.path), *key.git_config(), "commit", "-q", "-S", "--allow-empty", "-m", message],
                env=env,
            )
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").strip()

    def tag(self, name: str, ref: str = "HEAD") -> None:
        self.git("tag", "-f", name, ref)


# ------------------------------------------------------------------------------------------- repo content
# A config repo's files for nodes with 8 x H100 SXM5 80GB (0x233010DE).
CONFIG_YAML = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
  all-3g.40gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
  five-1g-one-2g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 5
        "2g.20gb": 1
"""

UNPLACEABLE = (
    CONFIG_YAML
    + """\
  too-many:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 8
"""
)


def nodes_yaml(
    assignments: str = "",
    *,
    default: str | None = None,
    max_unavailable: object = "100%",
    strategy: str | None = None,
    prune: bool | None = None,
    extra: str = "",
) -> str:
    """A nodes.yaml; `assignments` is the YAML list body (already indented by two spaces)."""
    lines = ["version: v1"]
    if strategy:
        lines.append(f"strategy: {strategy}")
    lines.append(
        f"rollout: {{maxUnavailable: {max_unavailable if isinstance(max_unavailable, int) else repr(max_unavailable)}}}"
    )
    if default:
        lines.append(f"default: {default}")
    if prune is not None:
        lines.append(f"prune: {str(prune).lower()}")
    lines.append("assignments:" + ("\n" + assignments.rstrip() if assignments.strip() else " []"))
    return "\n".join(lines) + "\n" + extra


class Clone:
    """A working copy of a repository on the loopback git server (Flux, Argo CD tests): commit files, push
    over HTTP as a user would; the pushed SHA."""

    def __init__(self, url: str, path: Path) -> None:
        self.path = path
        run(["git", "clone", "-q", url, str(path)])
        run(["git", "-C", str(path), "config", "commit.gpgsign", "false"])

    def push(self, files: dict[str, str | None], message: str) -> str:
        run(["git", "-C", str(self.path), "pull", "-q", "--ff-only"])
        for name, text in files.items():
            target = self.path / name
            if text is None:
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        run(["git", "-C", str(self.path), "add", "-A"])
        run(["git", "-C", str(self.path), "commit", "-q", "--allow-empty", "-m", message])
        run(["git", "-C", str(self.path), "push", "-q", "origin", "HEAD:main"])
        return run(["git", "-C", str(self.path), "rev-parse", "HEAD"]).strip()
