"""The repository being followed and the revisions parsed (the last few). Those refused for good (a
commit's signature does not change) are kept in the sync's state (`state.FetchVerdict.unverified`)."""

from __future__ import annotations

from pathlib import Path

from migops.api.migsync import CONFIG_FILE, NODES_FILE, TrustPolicy
from migops.gitops.repo import RepoSpec, load_repo
from migops.gitops.source import GitAuth, GitSource
from migops.gitops.verify import verify_commit

_KEPT = 4  # parsed revisions kept (a rollback to one of them costs no git read)


class Revisions:
    def __init__(self, cache_dir: Path, auth: GitAuth, timeout: float) -> None:
        self._cache_dir = cache_dir
        self._auth = auth
        self._timeout = timeout
        self._source: GitSource | None = None
        self._source_key: tuple[str, str | None] | None = None
        self._parsed: dict[str, RepoSpec] = {}  # "revision:path" -> parsed

    def source(self, url: str, ref: str | None) -> GitSource:
        """The source for (url, ref): the same one (and its mirror) while they stay the same."""
        if self._source is None or self._source_key != (url, ref):
            self._source = GitSource(url, ref, cache_dir=self._cache_dir, auth=self._auth, timeout=self._timeout)
            self._source_key = (url, ref)
        return self._source

    def parsed(self, revision: str, path: str) -> RepoSpec | None:
        return self._parsed.get(f"{revision}:{path}")

    def verify(self, source: GitSource, revision: str, path: str, trust: TrustPolicy) -> None:
        """Raises VerificationError; a revision already parsed was verified before."""
        if self.parsed(revision, path) is None:
            verify_commit(source.commit_object(revision), revision, trust)

    def load(self, source: GitSource, revision: str, path: str) -> RepoSpec:
        """Read and parse the revision's two files (cached); raises RepoError or SourceError."""
        found = self.parsed(revision, path)
        if found is not None:
            return found
        files = source.read_files(revision, [f"{path}/{n}" if path else n for n in (CONFIG_FILE, NODES_FILE)])
        found = self._parsed[f"{revision}:{path}"] = load_repo(files, path, revision)
        while len(self._parsed) > _KEPT:
            self._parsed.pop(next(iter(self._parsed)))
        return found

    def verified_load(self, source: GitSource, revision: str, path: str, trust: TrustPolicy) -> RepoSpec:
        self.verify(source, revision, path, trust)
        return self.load(source, revision, path)
