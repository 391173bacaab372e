"""`migops suggest`: the MIG geometry that serves pending demand, proposed as a change to the config repo.

It reads the cluster (or a saved `kubectl get nodes,pods -A -o json`), the config repo (a working tree,
or `--repo URL --ref REF`), and prints the proposal (`-o text|json|patch`); `--write` edits the working
tree, `--commit --branch NAME [--push]` commits it to a new branch for a pull request. It never changes
the cluster. Exit codes: 0 a proposal, no change or no demand; 1 the repo does not validate against the
cluster (the problems are printed, nothing is proposed); 2 usage; 3 git or the cluster failed, the solver
(OR-Tools, the optional extra `migops[suggest]`) is not installed, or the proposal could not be completed
(the message says why; nothing is written).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from migops.cli.outputs import document
from migops.cli.usage import EXIT_INVALID, EXIT_OK, UsageError
from migops.kube import client as kube_client

EXIT_FAILED = 3


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "suggest",
        help="propose the MIG geometry that serves pending MIG pods, as a change to nodes.yaml",
        description="Read pending pods that ask for MIG devices, the GPU nodes and the config repo, and "
        "propose which nodes take which config of config.yaml (most demand served by priority, then the "
        "fewest GPUs and nodes changed; never a plan that destroys an instance a running pod uses). "
        "Nothing is applied: --write edits the working tree, --commit a new branch.",
    )
    p.add_argument("tree", nargs="?", default=".", help="working tree of the config repo (default: .)")
    p.add_argument("--path", default="", metavar="P", help="directory holding config.yaml and nodes.yaml")
    p.add_argument("--repo", metavar="URL", help="read the config repo from git instead of a working tree")
    p.add_argument("--ref", metavar="REF", help="with --repo: branch, tag or commit (default: the remote's HEAD)")
    p.add_argument(
        "--objects",
        type=Path,
        metavar="FILE",
        help="read nodes, pods (and ClusterPolicies) from this JSON List (`kubectl get nodes,pods -A -o json`) "
        "instead of the cluster",
    )
    kube_client.add_arguments(p)
    p.add_argument("-o", "--output", choices=("text", "json", "patch"), default="text")
    p.add_argument("--write", action="store_true", help="write the proposed nodes.yaml into the working tree")
    p.add_argument("--commit", action="store_true", help="commit the proposal to a new branch (--branch)")
    p.add_argument("--branch", metavar="NAME", help="with --commit: the branch to create")
    p.add_argument("--push", action="store_true", help="with --commit: push the branch to the remote (origin)")
    p.add_argument(
        "--time-limit",
        type=_seconds,
        default=10.0,
        metavar="S",
        help="wall-clock safety net of the solver, seconds > 0 (default 10)",
    )
    p.set_defaults(func=cmd_suggest)


def _seconds(text: str) -> float:
    """--time-limit: a finite number of seconds above 0 (argparse names the option when this refuses)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds must be a finite number above 0")
    return value


def _read_tree(args: argparse.Namespace) -> tuple[dict[str, bytes | None], str]:
    from migops.api.migsync import CONFIG_FILE, NODES_FILE

    root = Path(args.tree)
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory (the config repo's working tree)")
    files: dict[str, bytes | None] = {}
    for name in (CONFIG_FILE, NODES_FILE):
        rel = f"{args.path}/{name}" if args.path else name
        f = root / rel
        files[rel] = f.read_bytes() if f.is_file() else None
    return files, "working tree"


def _read_repo(args: argparse.Namespace) -> tuple[dict[str, bytes | None], str]:
    from migops.api.migsync import CONFIG_FILE, NODES_FILE
    from migops.gitops.source import GitSource, SourceError

    with tempfile.TemporaryDirectory(prefix="migops-suggest-") as cache:
        source = GitSource(args.repo, args.ref, Path(cache))
        try:
            fetched = source.fetch()
            paths = [f"{args.path}/{n}" if args.path else n for n in (CONFIG_FILE, NODES_FILE)]
            return source.read_files(fetched.revision, paths), fetched.revision
        except SourceError as exc:
            raise _Failed(str(exc)) from None


class _Failed(Exception):
    """git or the cluster failed: exit 3."""


def _cluster(args: argparse.Namespace) -> Any:
    from migops.suggest.run import Cluster

    if args.objects is not None:
        try:
            doc = json.loads(args.objects.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"{args.objects}: {exc}") from None
        items = doc.get("items") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise UsageError(f"{args.objects}: not a JSON List (items) as `kubectl get ... -o json` prints it")
        return Cluster.from_items(items)
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    from migops.kube.clusterpolicy import read_settings
    from migops.suggest.live import read_cluster

    try:
        api = kube_client.api_client(args.kubeconfig, args.context)
    except (ConfigException, OSError) as exc:
        raise UsageError(f"no cluster to talk to: {exc}") from None
    try:
        return read_cluster(api, read_settings(api))
    except (ApiException, HTTPError, OSError) as exc:
        raise _Failed(f"cannot read the cluster: {exc}") from None
    finally:
        api.close()


def _check_args(args: argparse.Namespace) -> None:
    if args.commit and not args.branch:
        raise UsageError("--commit needs --branch NAME")
    if (args.branch or args.push) and not args.commit:
        raise UsageError("--branch and --push go with --commit")
    if args.write and args.repo:
        raise UsageError("--write edits a working tree; with --repo use --commit --branch NAME --push")
    if args.repo and args.commit and not args.push:
        raise UsageError("with --repo, --commit needs --push (the clone it commits in is thrown away)")
    args.path = args.path.strip("/")


def cmd_suggest(args: argparse.Namespace) -> int:
    from migops.suggest.solve import SolverMissing, require_solver

    _check_args(args)
    try:
        # Before reading anything: a missing solver is said at once, not after a clone and a cluster read.
        require_solver()
        return _suggest(args)
    except (SolverMissing, _Failed) as exc:
        print(f"migops suggest: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 -- a user gets a message and the exit code, never a traceback
        print(f"migops suggest: internal error, nothing was written (please report it): {exc!r}", file=sys.stderr)
        return EXIT_FAILED


def _suggest(args: argparse.Namespace) -> int:
    from migops.gitops.repo import RepoError, load_repo
    from migops.suggest.run import NotWritable, suggest
    from migops.suggest.solve import Limits

    files, revision = _read_repo(args) if args.repo else _read_tree(args)
    try:
        spec = load_repo(files, args.path, revision)
        cluster = _cluster(args)
        out = suggest(spec, cluster, Limits(time_limit=args.time_limit, max_nodes=spec.nodes.suggest.max_nodes))
    except RepoError as exc:
        return _refused(args, exc)
    except NotWritable as exc:
        raise _Failed(str(exc)) from None
    _show(args, out)
    return EXIT_OK


def _show(args: argparse.Namespace, out: Any) -> None:
    from migops.suggest import report

    if args.output == "json":
        print(json.dumps(document("suggest", report.as_dict(out)), indent=2))
    elif args.output == "patch":
        sys.stdout.write(out.patch())
    else:
        print("\n".join(report.text(out)))
    if out.changed and args.write:
        for name, text in out.files().items():
            target = Path(args.tree) / name
            target.write_text(text)
            print(f"wrote {target}", file=sys.stderr)
    if out.changed and args.commit:
        _commit(args, out, report.summary(out), "\n".join(report.text(out)))
    elif args.commit:
        print("nothing to commit: no change proposed", file=sys.stderr)


def _refused(args: argparse.Namespace, exc: Any) -> int:
    if args.output == "json":
        print(
            json.dumps(
                document(
                    "suggest",
                    {
                        "outcome": "invalid",
                        "summary": "the config repo does not validate: nothing is proposed",
                        "problems": [p.as_dict() for p in exc.problems],
                    },
                ),
                indent=2,
            )
        )
    else:
        print("the config repo does not validate against this cluster: nothing is proposed", file=sys.stderr)
        for p in exc.problems:
            print(f"{p.severity}: {p}", file=sys.stderr)
    return EXIT_INVALID


def _git(cwd: Path | str, *argv: str) -> str:
    done = subprocess.run(["git", "-C", str(cwd), *argv], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise _Failed(f"git {' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _commit(args: argparse.Namespace, out: Any, subject: str, body: str) -> None:
    """Commit the proposed files on a new branch: in a temporary worktree of the working tree (the
    checkout itself is left as it is), or in a throwaway clone of --repo; then push when asked."""
    with tempfile.TemporaryDirectory(prefix="migops-suggest-") as tmp:
        work = Path(tmp) / "work"
        if args.repo:
            _git(tmp, "clone", "--quiet", "--no-checkout", args.repo, str(work))
            _git(work, "checkout", "--quiet", "-b", args.branch, out.spec.revision)
            owner: Path | None = None
        else:
            owner = Path(_git(args.tree, "rev-parse", "--show-toplevel").strip())
            _git(owner, "worktree", "add", "--quiet", "-b", args.branch, str(work), "HEAD")
        try:
            prefix = "" if args.repo else _git(args.tree, "rev-parse", "--show-prefix").strip()
            for name, text in out.files().items():
                target = work / prefix / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
                _git(work, "add", "--", str(Path(prefix) / name))
            _git(work, "commit", "--quiet", "-m", f"migops suggest: {subject}", "-m", body)
            sha = _git(work, "rev-parse", "HEAD").strip()
            if args.push:
                _git(work, "push", "--quiet", "origin", f"refs/heads/{args.branch}:refs/heads/{args.branch}")
            print(f"committed {sha[:12]} on branch {args.branch}" + (" (pushed)" if args.push else ""), file=sys.stderr)
        finally:
            if owner is not None:
                _git(owner, "worktree", "remove", "--force", str(work))
