"""https:// (git's smart HTTP over TLS, basic and bearer auth, a private CA) and ssh:// (the options migops
gives ssh, and the credentials it passes): real git clients against servers on loopback.

The HTTPS server is git's own `git http-backend` behind a small CGI bridge. No sshd is installed here, so
the ssh test puts an `ssh` on PATH that checks the options git was told to use and then runs the remote
command (git-upload-pack) locally, as sshd would after authenticating.
"""

from __future__ import annotations

import base64
import os
import ssl
import stat
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from gitrepo import CONFIG_YAML, GitRepo

from migops import certs
from migops.gitops.source import GitAuth, GitSource, SourceError

USER, PASSWORD, TOKEN = "alice", "pa55word", "tok-123"


class _GitHttp(BaseHTTPRequestHandler):
    root: Path

    def log_message(self, *args: object) -> None:
        pass

    def _authorised(self) -> bool:
        header = self.headers.get("Authorization", "")
        basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        return header in (basic, f"Bearer {TOKEN}")

    def _cgi(self) -> None:
        if not self._authorised():
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        env = {
            **os.environ,
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "REMOTE_USER": USER,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
        }
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode().split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _cgi  # noqa: N815


@pytest.fixture
def https_repo(tmp_path: Path) -> Iterator[tuple[str, Path, str]]:
    """(URL, CA file, HEAD SHA) of a repository served over TLS with basic/bearer auth."""
    repo = GitRepo(tmp_path / "work")
    sha = repo.commit({"config.yaml": CONFIG_YAML})
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.path), str(tmp_path / "srv" / "repo.git")], check=True)
    ca = certs.create_ca("test-git-ca")
    serving = certs.issue_serving(ca, "git", dns_names=("localhost",), ip_addresses=("127.0.0.1",))
    serving.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    handler = type("Handler", (_GitHttp,), {"root": tmp_path / "srv"})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}/repo.git", tmp_path / "ca.crt", sha
    httpd.shutdown()
    httpd.server_close()


def test_https_with_basic_and_bearer_auth_and_a_private_ca(https_repo, tmp_path: Path) -> None:
    url, ca, sha = https_repo
    (tmp_path / "password").write_text(PASSWORD + "\n")
    (tmp_path / "token").write_text(TOKEN)
    basic = GitSource(
        url,
        "main",
        cache_dir=tmp_path / "c1",
        auth=GitAuth(https_username=USER, https_password_file=tmp_path / "password", ca_file=ca),
    )
    assert basic.fetch().revision == sha
    assert basic.read_files(sha, ["config.yaml"])["config.yaml"] == CONFIG_YAML.encode()
    bearer = GitSource(
        url, "main", cache_dir=tmp_path / "c2", auth=GitAuth(https_password_file=tmp_path / "token", ca_file=ca)
    )
    assert bearer.fetch().revision == sha
    # No credentials: refused, never a password prompt. Unknown CA: refused.
    with pytest.raises(SourceError) as err:
        GitSource(url, "main", cache_dir=tmp_path / "c3", auth=GitAuth(ca_file=ca), timeout=30).fetch()
    assert err.value.reason == "GitUnreachable"
    with pytest.raises(SourceError) as err:
        GitSource(
            url, "main", cache_dir=tmp_path / "c4", timeout=30, auth=GitAuth(https_password_file=tmp_path / "token")
        ).fetch()
    assert "certificate" in str(err.value).lower()
    # The secret never appears in what an error says.
    assert TOKEN not in str(err.value) and PASSWORD not in str(err.value)


def test_ssh_url_gets_key_known_hosts_and_batch_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = GitRepo(tmp_path / "work")
    sha = repo.commit({"config.yaml": CONFIG_YAML})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "ssh-args"
    fake = bin_dir / "ssh"
    # sshd would run the remote command in the user's shell after authenticating; so do we, after
    # recording the options (the last argument is the command, e.g. git-upload-pack '/path').
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {seen}\nfor last; do :; done\nexec sh -c "$last"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    key, hosts = tmp_path / "id_ed25519", tmp_path / "known_hosts"
    key.write_text("(a private key)")
    hosts.write_text("(host keys)")
    src = GitSource(
        f"ssh://git@git.example.com{repo.path}",
        "main",
        cache_dir=tmp_path / "c",
        auth=GitAuth(ssh_key=key, known_hosts=hosts),
    )
    assert src.fetch().revision == sha
    args = seen.read_text().splitlines()
    for option in ("BatchMode=yes", "StrictHostKeyChecking=yes", f"UserKnownHostsFile={hosts}", "IdentitiesOnly=yes"):
        assert option in args
    assert args[args.index("-i") + 1] == str(key)
    assert "git@git.example.com" in args
    # scp-style URLs go the same way.
    assert GitSource(f"git@git.example.com:{repo.path}", "main", cache_dir=tmp_path / "c2").fetch().revision == sha
