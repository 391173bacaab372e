"""A git server on loopback: `git http-backend` (git's own smart-HTTP CGI) behind a small HTTP server.

Flux's source-controller fetches over http(s) or ssh, never file://, so `migops local up --flux` and
the Flux tests serve their config repositories here: `http://127.0.0.1:PORT/<name>.git`, clone, fetch
and push (real git on both sides). Every bare repository under `--root` is served; push is on (the
server sets REMOTE_USER, which is what enables git's receive-pack over HTTP). Loopback only, no
authentication: it is a local test server, not a git host.

Bounded: a request body over MAX_BODY is answered 413 before git sees it; anything but GET/POST is
405; a path with `..` is 404, as is any path git does not serve. Run as `python -m migops.local.gitserver --root DIR
--port N`; `start` runs it detached and waits until it answers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from migops.local.ports import LOOPBACK, free_ports
from migops.local.process import ProcessRef, spawn, stop

MAX_BODY = 64 << 20  # a MIG config repository's pushes are kilobytes
PUSH_USER = "migops-local"


def _git() -> str:
    git = shutil.which("git")
    if git is None:
        raise RuntimeError("git is not on PATH")
    return git


class _Handler(BaseHTTPRequestHandler):
    server_version = "migops-gitserver"
    root: Path  # set on the subclass made by serve()

    def do_GET(self) -> None:
        self._cgi(None)

    def do_POST(self) -> None:
        self._cgi(self._body())

    def _refuse(self, code: int, message: str) -> None:
        body = f"{message}\n".encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> BinaryIO | None:
        """The request body spooled to a file (git reads it from stdin); None after answering 4xx."""
        spool = tempfile.TemporaryFile()
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            total = 0
            while True:
                line = self.rfile.readline(100)
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    self._refuse(400, "bad chunk size")
                    return None
                if size == 0:
                    self.rfile.readline(100)
                    break
                total += size
                if total > MAX_BODY:
                    self._refuse(413, f"request body over {MAX_BODY} bytes")
                    return None
                spool.write(self.rfile.read(size))
                self.rfile.readline(10)
        else:
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                self._refuse(400, "bad Content-Length")
                return None
            if length < 0 or length > MAX_BODY:
                self._refuse(413, f"request body over {MAX_BODY} bytes")
                return None
            while length > 0:
                chunk = self.rfile.read(min(length, 1 << 16))
                if not chunk:
                    break
                spool.write(chunk)
                length -= len(chunk)
        spool.seek(0)
        return spool

    def _cgi(self, body: BinaryIO | None) -> None:
        if self.command == "POST" and body is None:
            return  # already answered
        url = urlsplit(self.path)
        if not url.path.startswith("/") or ".." in url.path.split("/"):
            self._refuse(404, "no such repository")
            return
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(self.root),
            "REMOTE_USER": PUSH_USER,
            "REMOTE_ADDR": self.client_address[0],
            "REQUEST_METHOD": self.command,
            "PATH_INFO": url.path,
            "QUERY_STRING": url.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
        }
        if body is not None:
            env["CONTENT_LENGTH"] = str(os.fstat(body.fileno()).st_size)
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        proc = subprocess.Popen(
            [_git(), "http-backend"], env=env, stdin=body or subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None
        )
        try:
            self._relay(proc)
        finally:
            proc.stdout.close()  # type: ignore[union-attr]
            proc.wait()
            if body is not None:
                body.close()

    def _relay(self, proc: subprocess.Popen[bytes]) -> None:
        """CGI output -> HTTP response: headers (Status: sets the code), then the body as it comes."""
        out = proc.stdout
        assert out is not None
        status, headers = 200, []
        while True:
            line = out.readline(8192).rstrip(b"\r\n")
            if not line:
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            else:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.end_headers()
        shutil.copyfileobj(out, self.wfile, 1 << 16)
        self.close_connection = True

    def do_PUT(self) -> None:
        self._refuse(405, "only GET and POST")

    do_DELETE = do_PATCH = do_HEAD = do_PUT  # noqa: N815 - http.server's naming

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def serve(root: Path, port: int) -> None:
    handler = type("Handler", (_Handler,), {"root": root.resolve()})
    with ThreadingHTTPServer((LOOPBACK, port), handler) as server:
        server.daemon_threads = True
        server.serve_forever()


# ------------------------------------------------------------------------------------------- owner side
def identifying_arguments(root: Path) -> tuple[str]:
    """The argument only the server for `root` is started with (for `migops local down`)."""
    return (f"--root={root}",)


def init_bare(root: Path, name: str) -> Path:
    """An empty bare repository `<root>/<name>.git` whose HEAD is branch main."""
    path = root / f"{name}.git"
    if not path.exists():
        subprocess.run(
            [_git(), "init", "-q", "--bare", "-b", "main", str(path)], check=True, capture_output=True, timeout=60
        )
    return path


_COMMITTER = {
    "GIT_AUTHOR_NAME": "migops local",
    "GIT_AUTHOR_EMAIL": "migops-local@localhost",
    "GIT_COMMITTER_NAME": "migops local",
    "GIT_COMMITTER_EMAIL": "migops-local@localhost",
}


def _run(*argv: str, cwd: Path | None = None) -> str:
    out = subprocess.run(
        [_git(), *argv],
        cwd=cwd,
        env={**os.environ, **_COMMITTER},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(argv)} failed: {out.stderr.strip()}")
    return out.stdout


def has_commits(bare: Path) -> bool:
    return (
        subprocess.run(
            [_git(), "-C", str(bare), "rev-parse", "-q", "--verify", "refs/heads/main"],
            capture_output=True,
            timeout=60,
            check=False,
        ).returncode
        == 0
    )


def head(bare: Path) -> str:
    return _run("-C", str(bare), "rev-parse", "refs/heads/main").strip()


def commit(bare: Path, files: dict[str, str], message: str) -> str:
    """One commit on main of `bare` writing `files` (path -> text), made in a throwaway clone and pushed;
    its SHA. (Tests push their own commits over HTTP, as a user would.)"""
    with tempfile.TemporaryDirectory(prefix="migops-git-") as tmp:
        work = Path(tmp) / "w"
        _run("clone", "-q", str(bare), str(work))
        _run("-C", str(work), "checkout", "-q", "-B", "main")
        for name, text in files.items():
            target = work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        _run("-C", str(work), "add", "-A")
        _run("-C", str(work), "-c", "commit.gpgsign=false", "commit", "-q", "-m", message)
        _run("-C", str(work), "push", "-q", "origin", "HEAD:refs/heads/main")
        return _run("-C", str(work), "rev-parse", "HEAD").strip()


def start(
    root: Path, log: Path, *, probe: str, timeout: float = 30.0
) -> tuple[subprocess.Popen[bytes], ProcessRef, str]:
    """Serve the bare repositories under `root` on a free loopback port; return once `probe` (the
    name of one of them, without .git) answers git's ref advertisement. (popen, ref, base URL)."""
    root.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        (port,) = free_ports(1)
        popen, ref = spawn(
            [sys.executable, "-m", "migops.local.gitserver", *identifying_arguments(root), f"--port={port}"], log
        )
        base = f"http://{LOOPBACK}:{port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and popen.poll() is None:
            try:
                with urllib.request.urlopen(f"{base}/{probe}.git/info/refs?service=git-upload-pack", timeout=5) as r:
                    if r.status == 200:
                        return popen, ref, base
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        stop(ref, popen=popen)  # lost the port race, or never answered: try another port
    raise RuntimeError(f"the git server for {root} did not answer; see {log}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m migops.local.gitserver", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="directory holding the bare repositories")
    parser.add_argument("--port", type=int, required=True, help=f"port on {LOOPBACK}")
    args = parser.parse_args(argv)
    serve(args.root, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
