"""Fetch a git repository with the real git client and pin one commit.

A bare mirror is kept in a cache directory and updated with `git fetch` (branches, tags and the remote
HEAD), so each poll transfers only what is new, and files are read straight from the object store
(`git cat-file`): there is no work tree to get out of step. Any URL git understands works: a local
path, file://, https:// (optionally with a bearer/basic token and a CA file) and ssh:// or scp-style
(with a private key and known_hosts). git never prompts: a missing credential is an error, not a hang.

A ref is a branch name, a tag name, a full or abbreviated commit SHA, or a full ref (`refs/heads/x`,
`refs/tags/v1`); none means the remote's HEAD. The revision is always the 40-hex commit SHA.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from migops.gitops.reasons import SourceReason

_HEX = re.compile(r"^[0-9a-f]{7,64}$")
_FETCH_REFSPECS = ("+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
_HEAD_REFSPEC = "+HEAD:refs/migops/remote-HEAD"  # only when no ref is given: an empty remote HEAD is no error then


class SourceError(Exception):
    """The repository could not be fetched, or the ref or a file could not be read.

    `reason` (gitops.reasons): GitUnreachable, RefNotFound, GitFailed.
    """

    def __init__(self, reason: SourceReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class GitAuth:
    """Credentials, all optional. Secrets travel in the environment of the git process, never its argv."""

    ssh_key: Path | None = None  # private key for ssh:// and scp-style URLs
    known_hosts: Path | None = None  # else ~/.ssh/known_hosts; host keys are always checked
    https_username: str | None = None  # with a password/token: HTTP basic auth
    https_password_file: Path | None = None  # a token without a username: bearer auth
    ca_file: Path | None = None  # extra CA bundle for https://


@dataclass(frozen=True)
class Fetched:
    """One commit of the remote, pinned."""

    url: str
    ref: str  # as asked, "" for the remote's HEAD
    resolved: str  # the full ref it resolved through (refs/remotes/origin/main, refs/tags/v1) or the SHA
    revision: str  # commit SHA
    subject: str = ""
    author: str = ""
    committed_at: int = 0  # unix seconds

    @property
    def short(self) -> str:
        return self.revision[:12]


def normalise_path(path: str | None) -> str:
    """`./clusters/prod/` -> `clusters/prod`; '' for the root. Rejects absolute paths and `..`."""
    parts = [p for p in (path or "").replace("\\", "/").split("/") if p not in ("", ".")]
    if (path or "").startswith("/") or ".." in parts:
        raise ValueError(f"path {path!r} must be relative to the repository root, without '..'")
    return "/".join(parts)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "migops" / "git"


@dataclass
class GitSource:
    """A remote repository and the ref to follow; `fetch()` updates the mirror and pins a commit."""

    url: str
    ref: str | None = None
    cache_dir: Path = field(default_factory=default_cache_dir)
    auth: GitAuth = field(default_factory=GitAuth)
    timeout: float = 60.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.ref == "HEAD":
            self.ref = None  # the remote's HEAD
        if not self.url:
            raise ValueError("a repository URL is required")
        if "://" not in self.url and ":" not in self.url.split("/")[0]:
            # A local path: absolute, so the cached mirror does not depend on the working directory.
            self.url = str(Path(self.url).expanduser().resolve())
        key = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        self.mirror = Path(self.cache_dir) / key

    # ------------------------------------------------------------------------------ fetching
    def fetch(self) -> Fetched:
        with self._lock:
            self._ensure_mirror()
            argv = [
                "fetch",
                "--prune",
                "--prune-tags",
                "--force",
                "--no-recurse-submodules",
                "--quiet",
                "origin",
                *_FETCH_REFSPECS,
                *(() if self.ref else (_HEAD_REFSPEC,)),
            ]
            if self.ref and _HEX.match(self.ref) and len(self.ref) == 40:
                # A pinned commit need not be a branch tip: ask for it by name too (servers allow it
                # for reachable commits under protocol v2; if one does not, the tips still hold it).
                try:
                    self._git(*argv, self.ref, network=True)
                    return self._resolve()
                except SourceError as exc:
                    if exc.reason == SourceReason.GIT_UNREACHABLE:
                        raise
            self._git(*argv, network=True)
            return self._resolve()

    def _ensure_mirror(self) -> None:
        if (self.mirror / "HEAD").exists():
            return
        self.mirror.mkdir(parents=True, exist_ok=True)
        self._git("init", "--bare", "--quiet")
        self._git("remote", "add", "origin", self.url)

    def _resolve(self) -> Fetched:
        ref = self.ref or ""
        if not ref:
            candidates = ["refs/migops/remote-HEAD"]
        elif ref.startswith("refs/heads/"):
            candidates = ["refs/remotes/origin/" + ref[len("refs/heads/") :]]
        elif ref.startswith("refs/"):
            candidates = [ref]
        else:
            candidates = [f"refs/remotes/origin/{ref}", f"refs/tags/{ref}"]
            if _HEX.match(ref):
                candidates.append(ref)
        for candidate in candidates:
            out = self._git("rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}", check=False)
            if out:
                sha = out.strip()
                meta = self._git("show", "-s", "--format=%ct%x00%an <%ae>%x00%s", sha).rstrip("\n").split("\0")
                return Fetched(
                    self.url,
                    ref,
                    candidate,
                    sha,
                    subject=meta[2] if len(meta) > 2 else "",
                    author=meta[1] if len(meta) > 1 else "",
                    committed_at=int(meta[0]) if meta and meta[0].isdigit() else 0,
                )
        what = "the remote's HEAD" if not ref else f"ref {ref!r}"
        raise SourceError(SourceReason.REF_NOT_FOUND, f"{what} not found in {self.url} (no such branch, tag or commit)")

    # ------------------------------------------------------------------------------ reading
    def read_files(self, revision: str, paths: list[str]) -> dict[str, bytes | None]:
        """The blobs at `revision:path` for each path; None where the path is absent (or not a file)."""
        found: dict[str, bytes | None] = {}
        for p, obj in zip(paths, self._batch([f"{revision}:{p}" for p in paths]), strict=True):
            # (Their size is judged with their content, by the loader: `repo.load_repo`.)
            found[p] = obj[1] if obj is not None and obj[0] == "blob" else None
        return found

    def path_trees(self, revision: str, path: str) -> tuple[bytes, ...]:
        """The raw tree objects from `revision`'s root down to directory `path` (normalised): with the
        commit object, what proves which blobs the commit holds there (gitops.verify.verify_files)."""
        parts = [p for p in path.split("/") if p]
        names = [f"{revision}^{{tree}}", *(f"{revision}:{'/'.join(parts[: i + 1])}" for i in range(len(parts)))]
        trees = []
        for name, obj in zip(names, self._batch(names), strict=True):
            if obj is None or obj[0] != "tree":
                raise SourceError(SourceReason.GIT_FAILED, f"{name} is not a directory in {self._shown_url()}")
            trees.append(obj[1])
        return tuple(trees)

    def _batch(self, names: list[str]) -> list[tuple[str, bytes] | None]:
        """(type, raw content) of each object name (`rev:path`, `rev^{tree}`), None where missing."""
        out = self._run_bytes(["cat-file", "--batch"], "".join(f"{n}\n" for n in names).encode())
        found: list[tuple[str, bytes] | None] = []
        pos = 0
        for _ in names:
            end = out.index(b"\n", pos)
            header = out[pos:end].decode(errors="replace").split()
            pos = end + 1
            if len(header) == 3 and header[1] in ("blob", "tree", "commit", "tag"):
                size = int(header[2])
                found.append((header[1], out[pos : pos + size]))
                pos += size + 1
            else:
                found.append(None)  # "<name> missing"
        return found

    def contains(self, head: str, revision: str) -> bool:
        """Whether `revision` is `head` or in its history (False too when the mirror lacks it: a
        history rewrite, e.g. a force-push, took it out of every ref that was fetched)."""
        if head == revision:
            return True
        try:
            self._git("merge-base", "--is-ancestor", revision, head)
            return True
        except SourceError:
            return False

    def commit_object(self, revision: str) -> bytes:
        """The raw commit object (headers, signature, message): what a signature covers."""
        return self._run_bytes(["cat-file", "commit", revision], b"")

    # ------------------------------------------------------------------------------ git
    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            GIT_TERMINAL_PROMPT="0",
            GIT_ASKPASS="/bin/false",
            SSH_ASKPASS="/bin/false",
            GIT_CONFIG_NOSYSTEM="1",
            GCM_INTERACTIVE="never",
            LC_ALL="C",
        )
        ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-o", "StrictHostKeyChecking=yes"]
        if self.auth.ssh_key:
            ssh += ["-i", str(self.auth.ssh_key), "-o", "IdentitiesOnly=yes"]
        if self.auth.known_hosts:
            ssh += ["-o", f"UserKnownHostsFile={self.auth.known_hosts}"]
        env["GIT_SSH_COMMAND"] = shlex.join(ssh)
        config: list[tuple[str, str]] = [
            ("http.lowSpeedLimit", "1"),
            ("http.lowSpeedTime", "30"),
            ("credential.helper", ""),
            ("core.askPass", "/bin/false"),
        ]
        if self.auth.ca_file:
            config.append(("http.sslCAInfo", str(self.auth.ca_file)))
        if self.auth.https_password_file:
            secret = Path(self.auth.https_password_file).read_text().strip()
            if self.auth.https_username:
                token = base64.b64encode(f"{self.auth.https_username}:{secret}".encode()).decode()
                config.append(("http.extraHeader", f"Authorization: Basic {token}"))
            else:
                config.append(("http.extraHeader", f"Authorization: Bearer {secret}"))
        env["GIT_CONFIG_COUNT"] = str(len(config))
        for i, (key, value) in enumerate(config):
            env[f"GIT_CONFIG_KEY_{i}"] = key
            env[f"GIT_CONFIG_VALUE_{i}"] = value
        return env

    def _git(self, *args: str, network: bool = False, check: bool = True) -> str:
        out = self._run_bytes(list(args), b"", network=network, check=check)
        return out.decode(errors="replace")

    def _run_bytes(self, args: list[str], stdin: bytes, *, network: bool = False, check: bool = True) -> bytes:
        argv = ["git", "-C", str(self.mirror), *args]
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env(),
                start_new_session=True,
            )
        except FileNotFoundError:
            raise SourceError(SourceReason.GIT_FAILED, "git is not installed") from None
        try:
            out, err = proc.communicate(stdin, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # git and its ssh/remote helpers
            proc.communicate()
            raise SourceError(
                SourceReason.GIT_UNREACHABLE if network else SourceReason.GIT_FAILED,
                f"git {args[0]} {self._shown_url()} timed out after {self.timeout:.0f}s",
            ) from None
        if proc.returncode != 0 and check:
            text = err.decode(errors="replace").strip().replace(str(self.mirror), "<cache>")
            raise SourceError(
                SourceReason.GIT_UNREACHABLE if network else SourceReason.GIT_FAILED,
                f"git {args[0]} {self._shown_url()} failed: {text or 'exit ' + str(proc.returncode)}",
            )
        return out if proc.returncode == 0 else b""

    def _shown_url(self) -> str:
        """The URL without any password embedded in it."""
        return re.sub(r"//[^/@]*:[^/@]*@", "//***@", self.url)
