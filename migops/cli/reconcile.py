"""`migops reconcile`, `migops diff`, `migops status`: the GitOps reconciler on the command line.

Exit codes: reconcile --once: 0 applied, in sync or rolling out; 1 the commit is invalid or unverified
(nothing applied); 3 the repo is unreachable, a write failed, the rollout is halted, or migops's
webhook would refuse the identity it runs as (said before anything is written: reconciler/preflight.py).
diff: 0 no changes, 1 changes (as `kubectl diff`), 3 the commit is invalid, unverified or unreachable, or
the API server denied a change's dry run; 4 migops's webhook refuses the dry runs to the identity diff
runs as, whatever the change (said before any is sent: `--as` the reconciler, or --no-server-dry-run).
status: 0 every MigSync Ready, 1 otherwise. 2 is a usage error everywhere.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from migops import logs
from migops.api.migsync import Condition, ConditionStatus, MigSyncStatus
from migops.api.objects import GpuOperator
from migops.cli.outputs import document
from migops.cli.usage import EXIT_INVALID, EXIT_OK, UsageError
from migops.kube import client as kube_client

EXIT_FAILED = 3
EXIT_REFUSED = 4  # diff: the dry runs are refused to this identity; the change is not judged
CLI_MANAGER = "migops-cli"  # field manager of a MigSync spec written from the command line


def register(sub: argparse._SubParsersAction) -> None:
    _register_reconcile(sub)
    _register_diff(sub)
    _register_status(sub)


def _register_reconcile(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser(
        "reconcile",
        help="sync a config repo into the cluster (MIG ConfigMap + node labels)",
        description="Fetch the config repo (config.yaml + nodes.yaml), validate it through the MIG "
        "core, and apply it: the MIG ConfigMap and nvidia.com/mig.config on each node, in waves. "
        "Without --repo the spec comes from the MigSync object --name.",
    )
    _source_args(r)
    r.add_argument(
        "--once", action="store_true", help="one sync, then exit (0 applied/in sync, 1 invalid commit, 3 failed)"
    )
    r.add_argument("--dry-run", action="store_true", help="print the diff (ConfigMap and node labels); write nothing")
    r.add_argument("--interval", default=None, metavar="DURATION", help="poll interval with --repo (default 60s)")
    r.add_argument(
        "--http-address",
        default=":8080",
        metavar="[HOST]:PORT",
        help="/healthz, /readyz, /metrics and POST /hook (default :8080)",
    )
    r.add_argument(
        "--hook-secret-file",
        type=Path,
        metavar="FILE",
        help="shared secret for POST /hook (HMAC X-Hub-Signature-256 / X-Signature, or X-Gitlab-Token)",
    )
    r.add_argument(
        "--no-leader-elect",
        dest="leader_elect",
        action="store_false",
        help="run without the Lease (only safe with one replica)",
    )
    r.add_argument("--workers", type=int, default=8, help="parallel label writes (default 8)")
    logs.add_arguments(r)
    r.set_defaults(func=cmd_reconcile)


def _register_diff(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser(
        "diff",
        help="what the config repo would change in the cluster (for pull-request checks)",
        description="Fetch and validate like reconcile, then print the ConfigMap and node-label "
        "changes, each also tried as a server-side dry run. Exit 0 no changes, 1 changes, "
        "3 invalid/unverified/unreachable or a dry run denied, 4 the dry runs refused to the identity diff "
        "runs as (migops's webhook lets only the reconciler write what git owns on a managed node: "
        "--as that identity, or --no-server-dry-run).",
    )
    _source_args(d)
    d.add_argument("-o", "--output", choices=("text", "json"), default="text")
    logs.add_arguments(d, default_level="warning")
    d.add_argument(
        "--no-server-dry-run",
        dest="server_dry_run",
        action="store_false",
        help="do not send the changes as server-side dry runs (needs no write permission)",
    )
    d.set_defaults(func=cmd_diff)


def _register_status(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "status",
        help="MigSync status: conditions, revisions, nodes",
        description="Print MigSync objects as a table (-n NS, -A for all namespaces); --nodes adds "
        "one row per node. Exit 0 when every one shown is Ready.",
    )
    s.add_argument("name", nargs="?", help="a MigSync (default: all in the namespace)")
    s.add_argument("-n", "--namespace", default="migops-system")
    s.add_argument("-A", "--all-namespaces", action="store_true")
    s.add_argument("--nodes", action="store_true", help="per-node desired config, phase, state and revision")
    kube_client.add_arguments(s)
    s.add_argument("-o", "--output", choices=("text", "json"), default="text")
    s.set_defaults(func=cmd_status)


def _source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", metavar="URL", help="git URL: path, file://, https:// or ssh://")
    p.add_argument("--ref", metavar="REF", help="branch, tag or commit (default: the remote's HEAD)")
    p.add_argument("--path", default="", metavar="P", help="directory holding config.yaml and nodes.yaml")
    kube_client.add_arguments(p)
    p.add_argument(
        "--as",
        dest="as_user",
        metavar="USER",
        help="impersonate USER, as kubectl --as (e.g. system:serviceaccount:migops-system:migops-reconciler, the "
        "identity migops's webhook accepts for what git owns; needs the impersonate permission)",
    )
    p.add_argument("--name", default="migops", help="the MigSync that holds the spec/status (default migops)")
    p.add_argument("-n", "--namespace", default="migops-system", help="its namespace (default migops-system)")
    p.add_argument(
        "--allowed-signers",
        type=Path,
        metavar="FILE",
        help="require commits signed by an SSH key in this OpenSSH allowed_signers file",
    )
    p.add_argument(
        "--trusted-key",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="require commits signed by this ASCII-armored OpenPGP public key (repeatable)",
    )
    p.add_argument("--ssh-key", type=Path, metavar="FILE", help="private key for ssh:// URLs")
    p.add_argument("--known-hosts", type=Path, metavar="FILE", help="known_hosts for ssh:// URLs")
    p.add_argument("--https-username", metavar="USER", help="with --https-password-file: basic auth")
    p.add_argument("--https-password-file", type=Path, metavar="FILE", help="password or token (bearer without a user)")
    p.add_argument("--ca-file", type=Path, metavar="FILE", help="CA bundle for https:// URLs")
    p.add_argument("--cache-dir", type=Path, metavar="DIR", help="git mirrors (default ~/.cache/migops/git)")
    # Before --log-level: -v info, -vv debug (kept so older command lines still work).
    p.add_argument("-v", "--verbose", action="count", default=0, help=argparse.SUPPRESS)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}") from None


def _spec(args: argparse.Namespace):  # noqa: ANN202
    from migops.api.migsync import SyncSpec, TrustPolicy
    from migops.api.schema import parse_duration

    if not args.repo:
        return None  # the MigSync's spec; --allowed-signers/--trusted-key then add to its trust (_trust)
    trust = _trust(args) or TrustPolicy()
    given = getattr(args, "interval", None)
    try:
        interval = parse_duration(given) if given else SyncSpec.interval
    except ValueError as exc:
        raise UsageError(f"--interval: {exc}") from None
    return SyncSpec(args.repo, args.ref or "", args.path or "", interval, False, trust)


def _trust(args: argparse.Namespace):  # noqa: ANN202
    """The keys the flags name (files: a mounted Secret or ConfigMap in a cluster), None without any.
    With a MigSync they are a floor its spec cannot lower: commits must be signed (docs/reconciler.md)."""
    from migops.api.migsync import TrustPolicy, VerifyMode

    keys = tuple(_read(p) for p in args.trusted_key)
    signers = _read(args.allowed_signers) if args.allowed_signers else ""
    return TrustPolicy(VerifyMode.HEAD, signers, keys) if keys or signers else None


def _auth(args: argparse.Namespace):  # noqa: ANN202
    from migops.gitops.source import GitAuth

    return GitAuth(args.ssh_key, args.known_hosts, args.https_username, args.https_password_file, args.ca_file)


def _logging(args: argparse.Namespace) -> None:
    level = args.log_level if not args.verbose else "info" if args.verbose == 1 else "debug"
    logs.setup("reconciler", level, args.log_format, {"migsync": f"{args.namespace}/{args.name}"})


def _api(args: argparse.Namespace):  # noqa: ANN202
    from kubernetes.config.config_exception import ConfigException

    try:
        api = kube_client.api_client(args.kubeconfig, args.context)
    except (ConfigException, OSError) as exc:
        raise UsageError(f"no cluster to talk to: {exc}") from None
    if getattr(args, "as_user", None):
        api.set_default_header("Impersonate-User", args.as_user)
    return api


class WouldBeRefused(Exception):
    """The webhook would refuse this identity's node writes (or their dry runs): said before any is sent."""


def _dry_run_asker(args: argparse.Namespace):  # noqa: ANN202
    """diff's question to the webhook before its server-side dry runs (reconciler/preflight.py): an
    identity it refuses the node writes would see every dry run denied, whatever the change."""
    from migops.reconciler.preflight import Asker

    command = "migops diff" if args.command == "diff" else "migops reconcile --dry-run"
    return Asker(
        command,
        "the server-side dry runs would be refused: migops's webhook denies this identity the node writes "
        "whatever the change (the change itself is not judged)",
        (f"or without the API server's verdict: {command} --no-server-dry-run ...",) if args.command == "diff" else (),
    )


def _reconciler(args: argparse.Namespace, *, dry_run: bool, once: bool, asker: Any = None):  # noqa: ANN202
    """The reconciler the flags describe; with `asker` (reconciler.preflight.Asker), WouldBeRefused first when
    migops's webhook would deny this identity the node writes."""
    from migops.reconciler.controller import Reconciler

    spec = _spec(args)
    api = _api(args)
    rec = Reconciler(
        api,
        name=args.name,
        namespace=args.namespace,
        spec=spec,
        cache_dir=args.cache_dir,
        auth=_auth(args),
        dry_run=dry_run,
        workers=getattr(args, "workers", 8),
        enforce_last_good=not once,
        trust=None if spec is not None else _trust(args),
        finalizer=not once,
    )
    if asker is not None:
        from migops.reconciler.preflight import refusal

        refused = refusal(api, rec.owner, asker)
        if refused is not None:
            rec.writer.api.close()
            api.close()
            raise WouldBeRefused(refused)
    if spec is not None and not dry_run:
        _apply_migsync(api, args.name, args.namespace, spec)
    return rec


def _apply_migsync(api: Any, name: str, namespace: str, spec: Any) -> None:
    """With --repo, the flags are the spec: record them in the MigSync (when its CRD is installed), so
    `migops status` and `kubectl get migsync` show what this reconciler does."""
    from kubernetes.client.exceptions import ApiException

    from migops.api.migsync import migsync_object
    from migops.kube import ssa

    try:
        ssa.apply(api, migsync_object(name, namespace, spec), field_manager=CLI_MANAGER, force=True)
    except ApiException as exc:
        if exc.status != 404:
            raise
        logging.getLogger(__name__).warning(
            "MigSync %s/%s not recorded (%s): status goes to the log only", namespace, name, "no CRD or namespace"
        )


def _print_result(result: Any) -> None:
    stream = sys.stdout if result.ok else sys.stderr
    print(f"migops reconcile: {result.outcome}: {result.message}", file=stream)
    for p in result.problems:
        print(f"  {p}", file=stream)


def cmd_reconcile(args: argparse.Namespace) -> int:
    from migops.reconciler.reasons import SyncOutcome

    _logging(args)
    if args.dry_run:
        return _diff(args, output="text", server_dry_run=True, exit_on_change=False)
    from migops.reconciler.preflight import RECONCILE

    try:
        rec = _reconciler(args, dry_run=False, once=args.once, asker=RECONCILE if args.once else None)
    except WouldBeRefused as exc:
        print(f"migops reconcile: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.once:
        try:
            rec.start()
            result = rec.sync(fetch=True)
            rec.flush_status()
            rec.flush_events(60)
        finally:
            rec.stop()
        _print_result(result)
        if result.ok:
            return EXIT_OK
        return EXIT_INVALID if result.outcome in (SyncOutcome.INVALID, SyncOutcome.UNVERIFIED) else EXIT_FAILED
    from migops.reconciler.main import ServeOptions, serve

    host, _, port = args.http_address.rpartition(":")
    if not (port.isascii() and port.isdigit()):  # isdigit() alone passes "²", which int() refuses
        raise UsageError(f"--http-address {args.http_address!r}: expected [HOST]:PORT")
    secret = None
    if args.hook_secret_file is not None:
        if args.hook_secret_file.exists():
            secret = _read(args.hook_secret_file).strip().encode()
        else:  # the Deployment mounts an optional Secret: without one, there is no /hook
            logging.getLogger(__name__).warning("%s does not exist: POST /hook is off", args.hook_secret_file)
    if secret == b"":
        raise UsageError(f"{args.hook_secret_file}: the hook secret is empty")
    return serve(rec, ServeOptions(host or "0.0.0.0", int(port), secret, args.leader_elect))


def cmd_diff(args: argparse.Namespace) -> int:
    _logging(args)
    return _diff(args, output=args.output, server_dry_run=args.server_dry_run, exit_on_change=True)


def _diff(args: argparse.Namespace, *, output: str, server_dry_run: bool, exit_on_change: bool) -> int:
    try:
        rec = _reconciler(args, dry_run=True, once=True, asker=_dry_run_asker(args) if server_dry_run else None)
    except WouldBeRefused as exc:
        if output == "json":
            print(json.dumps(document("diff", {"outcome": "Refused", "message": str(exc), "problems": []}), indent=2))
        else:
            print(f"migops {args.command}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        rec.start()
        found, result = rec.diff(server_side=server_dry_run)
    finally:
        rec.stop()
    if found is None:
        if output == "json":
            print(
                json.dumps(
                    document(
                        "diff",
                        {"outcome": result.outcome, "message": result.message, "problems": list(result.problems)},
                    ),
                    indent=2,
                )
            )
        else:
            _print_result(result)
        return EXIT_FAILED
    if output == "json":
        print(json.dumps(document("diff", {**found.as_dict(), "warnings": list(result.problems)}), indent=2))
    else:
        for line in found.lines():
            print(line)
        for w in result.problems:
            print(f"warning: {w}")
    if found.denied:
        return EXIT_FAILED
    return EXIT_INVALID if (exit_on_change and found.changed) else EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from migops.api.migsync import parse_status

    api = _api(args)
    try:
        drift = _node_drift(api) if args.nodes else {}
        items = _read_migsyncs(api, args)
        operator = _gpu_operator(api)
    except LookupError as exc:
        print(f"migops status: {exc} not found", file=sys.stderr)
        return EXIT_INVALID
    finally:
        api.close()
    read = []
    for i in items:
        try:
            read.append((i["metadata"], parse_status(i)))
        except ValueError as exc:
            raise UsageError(f"MigSync {i['metadata']['namespace']}/{i['metadata']['name']}: {exc}") from None
    if args.output == "json":
        found = [
            {k: i["metadata"][k] for k in ("name", "namespace")} | {"spec": i.get("spec"), "status": i.get("status")}
            for i in items
        ]
        extra = {"gpuOperator": _operator_json(operator)} if operator is not None else {}
        print(json.dumps(document("status", {"items": found, **extra}), indent=2))
    else:
        _print_status(read, drift if args.nodes else None)
        _print_operator(operator)
    ok = all(_condition(s, "Ready").status == ConditionStatus.TRUE for _, s in read)
    return EXIT_OK if ok and items else EXIT_INVALID


def _gpu_operator(api: Any) -> GpuOperator | None:
    """Which stack of the GPU Operator the cluster runs; None when this identity may not read it."""
    from kubernetes.client.exceptions import ApiException

    from migops.kube.gpucluster import read_operator

    try:
        return read_operator(api)
    except ApiException:
        return None  # the MigSyncs' table still prints


def _print_operator(operator: GpuOperator | None) -> None:
    """Said only where it changes what migops does: a GPUCluster, or both stacks declared."""
    if operator is None:
        return
    if operator.gpu_cluster is not None:
        print(f"GPU Operator: {operator.describe()}")
    if operator.conflict:
        print(f"warning: {operator.conflict}")


def _operator_json(operator: GpuOperator) -> dict[str, Any]:
    return {
        "clusterPolicies": list(operator.policies),
        "gpuCluster": operator.gpu_cluster,
        "dynamicMIG": operator.dynamic_mig,
        "state": operator.state,
        "conflict": operator.conflict,
    }


def _read_migsyncs(api: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The MigSyncs asked for (one, a namespace's, or every namespace's)."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    from migops.api.migsync import GROUP, PLURAL, VERSION

    objects = k8s.CustomObjectsApi(api)
    try:
        if args.all_namespaces:
            return list(objects.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"])
        if args.name:
            return [objects.get_namespaced_custom_object(GROUP, VERSION, args.namespace, PLURAL, args.name)]
        return list(objects.list_namespaced_custom_object(GROUP, VERSION, args.namespace, PLURAL)["items"])
    except ApiException as exc:
        if exc.status == 404:
            what = f"MigSync {args.namespace}/{args.name}" if args.name else "the MigSync CRD"
            raise LookupError(what) from None
        raise UsageError(f"cannot read MigSyncs: HTTP {exc.status} {exc.reason}") from None


def _print_status(read: list[tuple[dict[str, Any], MigSyncStatus]], drift: dict[str, str] | None) -> None:
    """The MigSyncs' table, then each one's warnings and problems, and with `drift` its nodes."""
    from migops.cli.render import table

    rows = []
    for meta, s in read:
        ready = _condition(s, "Ready")
        summary = s.summary.in_sync if s.summary else "-"
        applied, attempted = (s.last_applied_revision or "-")[:12], (s.last_attempted_revision or "-")[:12]
        rows.append(
            [meta["namespace"], meta["name"], ready.status, ready.reason, summary, applied, attempted, ready.message]
        )
    for line in table(rows, ["NAMESPACE", "NAME", "READY", "REASON", "NODES", "APPLIED", "ATTEMPTED", "MESSAGE"]):
        print(line)
    for meta, s in read:
        for warning in _warnings(s):  # Ready can be True while these say something is off
            print(f"  {meta['name']}: warning: {warning}")
        for problem in s.problems or ():
            print(f"  {meta['name']}: {problem}")
        if drift is not None:
            _print_nodes(meta["name"], s, drift)


def _print_nodes(name: str, s: MigSyncStatus, drift: dict[str, str]) -> None:
    from migops.cli.render import table

    rows = [
        [
            n.name,
            n.config or "-",
            n.phase or "-",
            n.state or "-",
            (n.revision or "-")[:12],
            _with_drift(n.message, drift.get(n.name)),
        ]
        for n in s.nodes or ()
    ]
    print()
    print(f"{name}: {s.summary.in_sync if s.summary else '0/0'} nodes in sync")
    for line in table(rows, ["NODE", "CONFIG", "PHASE", "STATE", "REVISION", "MESSAGE"]):
        print(line)


def _node_drift(api: Any) -> dict[str, str]:
    """Node name -> what its agent says differs between its GPUs and the applied config (DRIFT_ANNOTATION)."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    from migops.api.names import DRIFT_ANNOTATION

    try:
        nodes = k8s.CoreV1Api(api).list_node().items
    except ApiException:
        return {}  # the MigSync table still prints; only the drift notes are missing
    return {
        n.metadata.name: (n.metadata.annotations or {})[DRIFT_ANNOTATION]
        for n in nodes
        if DRIFT_ANNOTATION in (n.metadata.annotations or {})
    }


def _with_drift(message: str, drift: str | None) -> str:
    if not drift or drift in message:
        return message
    return f"GPUs drifted: {drift}" + (f"; {message}" if message else "")


_KSTATUS = ("Ready", "Reconciling", "Stalled")  # the table's own columns say these


def _warnings(status: MigSyncStatus) -> list[str]:
    """The MigSync's other conditions that are False (AssignmentsMatched, AppliedRevisionAvailable):
    `TYPE (REASON): MESSAGE`, one line each."""
    return [
        f"{c.type} ({c.reason or '-'})" + (f": {c.message}" if c.message else "")
        for c in status.conditions
        if c.type not in _KSTATUS and c.status == ConditionStatus.FALSE
    ]


def _condition(status: MigSyncStatus, kind: str) -> Condition:
    """The condition of that type; Unknown, reason "-", when the status has none."""
    found = (c for c in status.conditions if c.type == kind)
    return next(found, Condition(kind, ConditionStatus.UNKNOWN, "-"))
