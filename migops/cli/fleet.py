"""`migops inventory` and `migops fleet status|pin|diff`: one config repo for several clusters (docs/fleet.md).

`inventory` records what an offline check needs of one cluster (its GPU nodes, the labels its selectors
read, the MIG strategy and ConfigMap) as the file committed beside the cluster's nodes.yaml;
`migops validate` of a fleet repo then judges every cluster on it (migops.gitops.fleet). `fleet status`
reads each cluster's MigSync through its kubeconfig context; `fleet pin` writes the commit every cluster's
MigSync follows; `fleet diff` shows which nodes of which cluster a change moves.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from migops.cli import fleet_gitops
from migops.cli.usage import EXIT_INVALID, EXIT_OK, UsageError
from migops.kube import client as kube_client

if TYPE_CHECKING:
    from migops.gitops.fleet import ClusterVerdict, FleetVerdict, Inventory, Reader

DEFAULT_NAMESPACE, DEFAULT_NAME = "migops-system", "migops"


def register(sub: argparse._SubParsersAction) -> None:
    _register_inventory(sub)
    _register_fleet(sub)


def _register_inventory(sub: argparse._SubParsersAction) -> None:
    inv = sub.add_parser(
        "inventory",
        help="record a cluster's GPU nodes for offline checks of a fleet repo",
        description="Write what `migops validate` of a fleet repo needs of one cluster: its GPU nodes "
        "(grouped by the labels recorded), the MIG strategy and the MIG ConfigMap (no secrets, no pod "
        "data). Commit it as clusters/<name>/inventory.yaml.",
    )
    inv.add_argument("--cluster", required=True, metavar="NAME", help="the cluster's name in fleet.yaml")
    inv.add_argument("-o", "--output", metavar="FILE", help="write here (default: standard output)")
    inv.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY",
        help="also record this label (repeat); the keys the nodes.yaml beside --output selects on are recorded anyway",
    )
    kube_client.add_arguments(inv)
    inv.set_defaults(func=cmd_inventory)


def _register_fleet(sub: argparse._SubParsersAction) -> None:
    fleet = sub.add_parser(
        "fleet",
        help="a fleet of clusters from one config repo: status, pin, diff, gitops",
        description="Work on a fleet repo (docs/fleet.md): fleet.yaml names the clusters and their waves, each "
        "cluster's directory holds its config.yaml, nodes.yaml, inventory and MigSync. status reads every "
        "cluster's MigSync, pin writes the commit each one follows, diff shows which nodes a change moves, gitops "
        "prints the Argo CD or Flux objects that roll it out wave by wave.",
    )
    cmds = fleet.add_subparsers(dest="fleet_command", metavar="SUBCOMMAND", required=True)
    st = cmds.add_parser(
        "status",
        help="every cluster's MigSync: revisions, nodes in sync, why not Ready",
        description="One row per cluster, read through its kubeconfig context. Exit 0 when every cluster is "
        "in sync, 1 while any is not (or cannot be read).",
    )
    st.add_argument("--fleet", metavar="DIR", help="a fleet repo: its clusters, in wave order, as context names")
    st.add_argument("--context", action="append", default=[], metavar="NAME", help="a cluster's context (repeat)")
    st.add_argument("--kubeconfig", metavar="FILE", help=kube_client.KUBECONFIG_HELP)
    st.add_argument("-n", "--namespace", default=DEFAULT_NAMESPACE, help="the MigSync's namespace")
    st.add_argument("--name", default=DEFAULT_NAME, help="the MigSync's name (default migops)")
    st.add_argument("-o", "--output", choices=("text", "json"), default="text")
    st.set_defaults(func=cmd_status)

    pin = cmds.add_parser(
        "pin",
        help="make every cluster's MigSync follow one commit",
        description="Rewrite spec.ref of each clusters/<name>/sync/migsync.yaml to REV's commit SHA; "
        "committed and pushed, the GitOps tool rolls it out wave by wave.",
    )
    pin.add_argument("revision", metavar="REV", help="a commit (any git revision; written as its full SHA)")
    pin.add_argument("root", nargs="?", default=".", metavar="DIR", help="the fleet repo (default .)")
    pin.add_argument("--cluster", action="append", default=[], metavar="NAME", help="only these clusters")
    pin.set_defaults(func=cmd_pin)

    diff = cmds.add_parser(
        "diff",
        help="which nodes of which cluster a change moves, offline",
        description="Judge the fleet repo at BASE and as it is now, both on the inventories as they are now, "
        "and print per cluster the nodes whose config changes. Exit 0 no change, 1 changes, 3 invalid.",
    )
    diff.add_argument("root", nargs="?", default=".", metavar="DIR", help="the fleet repo (default .)")
    diff.add_argument("--base", default="HEAD", metavar="REV", help="compare with this revision (default HEAD)")
    diff.add_argument("-o", "--output", choices=("text", "json"), default="text")
    diff.set_defaults(func=cmd_diff)

    fleet_gitops.register(cmds)


# ------------------------------------------------------------------------------------------ reading
def git_reader(root: Path, revision: str) -> Reader:
    """Files of `root`'s repository at `revision` (paths relative to `root`)."""
    prefix = _git(root, "rev-parse", "--show-prefix").strip()

    def read(path: str) -> bytes | None:
        found = subprocess.run(
            ["git", "-C", str(root), "show", f"{revision}:{prefix}{path}"], capture_output=True, check=False
        )
        return found.stdout if found.returncode == 0 else None

    return read


def _git(root: Path, *argv: str) -> str:
    found = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise UsageError(f"git {' '.join(argv)}: {found.stderr.strip() or 'failed'}")
    return found.stdout


def is_fleet_root(path: Path) -> bool:
    from migops.gitops.fleet import FLEET_FILE

    return (path / FLEET_FILE).is_file() if path.is_dir() else path.name == FLEET_FILE


def fleet_root(path: Path) -> Path:
    return path if path.is_dir() else path.parent


# ------------------------------------------------------------------------------------------ inventory
def cmd_inventory(args: argparse.Namespace) -> int:
    from migops.gitops.fleet import GPU_LABELS, INVENTORY_FILE, group_nodes

    keys = sorted(set(GPU_LABELS) | set(args.label) | _selected_keys(args.output))
    inventory = _read_inventory(args, keys, group_nodes)
    text = inventory_text(inventory, args.cluster)
    if args.output:
        Path(args.output).write_text(text)
        print(
            f"migops inventory: {inventory.node_count} GPU node(s) of cluster {args.cluster} in "
            f"{len(inventory.nodes)} group(s) written to {args.output}"
            + ("" if Path(args.output).name == INVENTORY_FILE else f" (a fleet repo reads {INVENTORY_FILE})"),
            file=sys.stderr,
        )
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _selected_keys(output: str | None) -> set[str]:
    """The label keys the selectors of the nodes.yaml beside the output file read."""
    from migops.api.migsync import NODES_FILE
    from migops.gitops.repo import parse_nodes
    from migops.mig.problems import MigError
    from migops.mig.yamlsafe import load_yaml

    if not output or not (Path(output).parent / NODES_FILE).is_file():
        return set()
    try:
        nodes = parse_nodes(load_yaml((Path(output).parent / NODES_FILE).read_bytes()), [])
    except MigError:
        return set()
    keys: set[str] = set()
    for a in nodes.assignments if nodes else ():
        if a.selector is not None:
            keys.update(k for k, _ in a.selector.match_labels)
            keys.update(r.key for r in a.selector.match_expressions)
    return keys


def _read_inventory(args: argparse.Namespace, keys: Sequence[str], group_nodes: Any) -> Inventory:
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    from migops.api.names import GPUS_ANNOTATION
    from migops.api.objects import annotations_of, labels, meta, node_gpus
    from migops.gitops.fleet import OWNERSHIP_LABELS, Inventory
    from migops.kube.clusterpolicy import read_settings
    from migops.kube.gpucluster import read_operator
    from migops.mig.catalogue import UnknownGpuError

    api = kube_client.api_client(args.kubeconfig, args.context)
    try:
        nodes = k8s.CoreV1Api(api).list_node(_preload_content=False)
        items = json.loads(nodes.data)["items"]
        settings = read_settings(api)
        operator = read_operator(api)
    except ApiException as exc:
        raise UsageError(
            f"cannot read the cluster's Nodes, ClusterPolicies and GPUClusters: HTTP {exc.status} {exc.reason}"
        ) from None
    finally:
        api.close()
    found = []
    for node in items:
        try:
            # No GPU named: nothing of nodes.yaml applies to it, unless another manager owns its MIG (the DRA
            # stack runs no GPU Feature Discovery: its nodes name no GPU), which the check then reports.
            if node_gpus(node) is None and not any(k in labels(node) for k in OWNERSHIP_LABELS):
                continue
        except UnknownGpuError:
            pass  # a GPU migops does not know: recorded, so the check says so
        found.append((str(meta(node).get("name")), labels(node), annotations_of(node).get(GPUS_ANNOTATION)))
    # Labels saying another manager owns a node's MIG geometry, recorded where a node has one.
    keys = sorted({*keys, *(k for k in OWNERSHIP_LABELS for _, lab, _ in found if k in lab)})
    nodes_recorded = group_nodes(found, keys)
    return Inventory(args.cluster, settings.strategy, settings.configmap, tuple(keys), nodes_recorded, operator)


def inventory_text(inventory: Inventory, cluster: str) -> str:
    import yaml

    head = (
        "# yaml-language-server: $schema=https://migops.io/schemas/inventory.v1.schema.json\n"
        f"# Written by `migops inventory --cluster {cluster}`: what `migops validate` of the fleet repo checks\n"
        "# this cluster's nodes.yaml against. Regenerate it when the cluster's GPU nodes change.\n"
    )
    return head + yaml.safe_dump(inventory.as_dict(), sort_keys=False, default_flow_style=None, width=120)


# ------------------------------------------------------------------------------------------ pin
_REF_LINE = re.compile(r"^(?P<indent>\s+)ref:[ \t]*(?:\"[^\"\n]*\"|'[^'\n]*'|[^#\s]*)(?P<rest>.*)$", re.M)


def cmd_pin(args: argparse.Namespace) -> int:
    from migops.gitops.fleet import MIGSYNC_FILE, FleetProblem, directory_reader, parse_fleet

    root = Path(args.root)
    sha = _git(root, "rev-parse", "--verify", f"{args.revision}^{{commit}}").strip()
    problems: list[FleetProblem] = []
    fleet = parse_fleet(directory_reader(root), problems)
    if fleet is None:
        raise UsageError("; ".join(map(str, problems)))
    unknown = set(args.cluster) - {c.name for c in fleet.clusters}
    if unknown:
        raise UsageError(f"no cluster {', '.join(sorted(unknown))} in fleet.yaml")
    for cluster in fleet.clusters:
        if args.cluster and cluster.name not in args.cluster:
            continue
        file = root / cluster.path / MIGSYNC_FILE
        text = file.read_text()
        if not _REF_LINE.search(text):
            raise UsageError(f"{file}: no spec.ref line to rewrite")
        file.write_text(_REF_LINE.sub(lambda m: f'{m.group("indent")}ref: "{sha}"{m.group("rest")}', text, count=1))
        print(f"{file}: ref {sha}")
    return EXIT_OK


# ------------------------------------------------------------------------------------------ diff
def cmd_diff(args: argparse.Namespace) -> int:
    from migops.cli.outputs import document
    from migops.gitops.desired import FitCache
    from migops.gitops.fleet import INVENTORY_FILE, check_fleet, cluster_changes, directory_reader

    root = Path(args.root)
    if not is_fleet_root(root):
        raise UsageError(f"{root}: no fleet.yaml (not a fleet repo)")
    here = directory_reader(root)
    then = git_reader(root, args.base)

    def base(path: str) -> bytes | None:  # the base's files on the inventories as they are now
        return here(path) if path.endswith(INVENTORY_FILE) else then(path)

    cache = FitCache()
    after = check_fleet(here, cache)
    before = {c.cluster.name: c for c in check_fleet(base, cache).clusters}
    rows = [(c, cluster_changes(before.get(c.cluster.name), c)) for c in after.clusters]
    if args.output == "json":
        body = {
            "base": args.base,
            "valid": after.valid,
            "clusters": [
                {
                    "cluster": c.cluster.name,
                    "wave": c.cluster.wave,
                    "valid": c.valid,
                    "changes": [{"node": n.node, "before": n.before, "after": n.after} for n in changes],
                    "problems": [p.as_dict() for p in c.problems],
                }
                for c, changes in rows
            ],
            "problems": [p.as_dict() for p in after.problems],
        }
        print(json.dumps(document("fleet-diff", body), indent=2))
    else:
        _diff_text(after, rows, args.base)
    if not after.valid:
        return 3
    return EXIT_INVALID if any(changes for _, changes in rows) else EXIT_OK


def _diff_text(after: FleetVerdict, rows: Sequence[tuple[ClusterVerdict, Sequence[Any]]], base: str) -> None:
    for p in after.problems:
        print(p)
    for verdict, changes in rows:
        c = verdict.cluster
        state = "valid" if verdict.valid else "INVALID"
        print(f"cluster {c.name} (wave {c.wave}): {len(changes)} of {verdict.nodes} node(s) change ({state})")
        for n in changes:
            print(f"  {n.node}: {n.before or '(none)'} -> {n.after or '(none)'}")
        for p in verdict.problems:
            if p.severity == "error":
                print(f"  {p}")
    print(f"(against {base}, on each cluster's inventory as committed now)")


# ------------------------------------------------------------------------------------------ status
def _contexts(kubeconfig: str | None) -> list[str]:
    """Every context of the kubeconfig (merged as kubectl merges $KUBECONFIG), in file order."""
    import os

    from kubernetes.config.kube_config import KubeConfigMerger

    found = kube_client.locate(kubeconfig)
    if not found.paths:
        raise UsageError("no kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config) to find contexts in")
    merger = KubeConfigMerger(os.pathsep.join(str(p) for p in found.paths))
    found_contexts = [getattr(c, "value", c) for c in merger.config.value.get("contexts") or []]
    return [str(c["name"]) for c in found_contexts if isinstance(c, Mapping) and c.get("name")]


def _targets(args: argparse.Namespace) -> list[tuple[str, int | None]]:
    """(context, wave) per cluster: --context as given, else fleet.yaml's clusters, else every context."""
    if args.context:
        return [(c, None) for c in args.context]
    if args.fleet:
        from migops.gitops.fleet import FleetProblem, directory_reader, parse_fleet

        problems: list[FleetProblem] = []
        fleet = parse_fleet(directory_reader(Path(args.fleet)), problems)
        if fleet is None:
            raise UsageError("; ".join(map(str, problems)))
        return [(c.name, c.wave) for wave in fleet.waves for c in wave]
    return [(c, None) for c in _contexts(args.kubeconfig)]


def read_cluster(kubeconfig: str | None, context: str, namespace: str, name: str) -> Mapping[str, Any]:
    """One cluster's MigSync as a status row (migops.reconciler.status's fields)."""
    from kubernetes import client as k8s

    from migops.api.migsync import GROUP, PLURAL, VERSION

    try:
        api = kube_client.api_client(kubeconfig, context)
    except Exception as exc:  # noqa: BLE001 - the kubeconfig's own error, shown for that cluster
        return _row(context, None, f"cannot connect: {exc}")
    try:
        obj = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, _request_timeout=10
        )
    except Exception as exc:  # noqa: BLE001 - unreachable, forbidden, not found: that cluster's row says so
        status = getattr(exc, "status", None)
        return _row(context, None, f"MigSync {namespace}/{name}: " + (f"HTTP {status}" if status else str(exc)))
    finally:
        api.close()
    return _row(context, obj, None)


def _row(context: str, obj: Mapping[str, Any] | None, error: str | None) -> dict[str, Any]:
    spec = (obj or {}).get("spec") or {}
    status = (obj or {}).get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}
    ready: Mapping[str, Any] = conditions.get("Ready") or {}
    summary = status.get("summary") or {}
    total, failed = summary.get("total"), summary.get("failed") or 0
    counted = re.fullmatch(r"\s*(\d+)\s*/\s*\d+\s*", str(summary.get("inSync") or ""))
    generation = ((obj or {}).get("metadata") or {}).get("generation")
    current = (
        status.get("observedGeneration") == generation and ready.get("observedGeneration", generation) == generation
    )
    ref = spec.get("ref")
    applied = status.get("lastAppliedRevision")
    at_ref = not ref or not re.fullmatch(r"[0-9a-f]{40}", ref) or applied == ref
    in_sync = bool(obj) and ready.get("status") == "True" and current and failed == 0 and at_ref
    return {
        "cluster": context,
        "inSync": in_sync,
        "ref": ref,
        "lastAppliedRevision": applied,
        "lastAttemptedRevision": status.get("lastAttemptedRevision"),
        "nodesInSync": int(counted.group(1)) if counted else None,
        "nodes": total,
        "failed": failed,
        "ready": ready.get("status", "Unknown") if obj else "Unknown",
        "stalled": (conditions.get("Stalled") or {}).get("status") == "True",
        "reason": error and "Unreachable" or ready.get("reason"),
        "message": error or ready.get("message"),
    }


def cmd_status(args: argparse.Namespace) -> int:
    from migops.cli.outputs import document
    from migops.cli.render import table

    targets = _targets(args)
    if not targets:
        raise UsageError("no cluster: give --context, --fleet or a kubeconfig with contexts")
    rows = [{**read_cluster(args.kubeconfig, c, args.namespace, args.name), "wave": w} for c, w in targets]
    if args.output == "json":
        print(
            json.dumps(document("fleet-status", {"inSync": all(r["inSync"] for r in rows), "clusters": rows}), indent=2)
        )
    else:
        head = ["CLUSTER", "WAVE", "IN SYNC", "NODES", "APPLIED", "ATTEMPTED", "REASON"]
        body = [
            [
                r["cluster"],
                "-" if r["wave"] is None else str(r["wave"]),
                "yes" if r["inSync"] else "no",
                "-" if r["nodes"] is None else f"{r['nodesInSync']}/{r['nodes']}",
                (r["lastAppliedRevision"] or "-")[:12],
                (r["lastAttemptedRevision"] or "-")[:12],
                "" if r["inSync"] else f"{r['reason'] or '-'}: {r['message'] or ''}".rstrip(": "),
            ]
            for r in rows
        ]
        for line in table(body, head):
            print(line)
    return EXIT_OK if all(r["inSync"] for r in rows) else EXIT_INVALID


# ------------------------------------------------------------------------------------------ validate
def fleet_checks(root: Path) -> tuple[int, list[Any]]:
    """`migops validate` of a fleet repo: (files read, one Checked per cluster and file with problems, or
    per cluster's nodes.yaml when it has none), each problem naming its cluster."""
    from migops.api.migsync import NODES_FILE
    from migops.cli.report import Checked
    from migops.gitops.fleet import FLEET_FILE, FleetProblem, check_fleet, directory_reader
    from migops.mig.problems import Problem

    verdict = check_fleet(directory_reader(root))

    def named(p: FleetProblem) -> Problem:
        message = f"cluster {p.cluster}: {p.problem.message}" if p.cluster else p.problem.message
        return Problem(p.problem.path, p.problem.rule, message, p.problem.severity, p.problem.line, p.problem.column)

    def by_file(problems: Sequence[FleetProblem]) -> dict[str, list[Problem]]:
        out: dict[str, list[Problem]] = {}
        for p in problems:
            out.setdefault(str(root / p.file), []).append(named(p))
        return out

    checked = [
        Checked(file, "fleet", None, True, tuple(found), kind="cluster")
        for file, found in by_file(verdict.problems).items()
    ]
    if verdict.fleet is None and not checked:
        checked.append(Checked(str(root / FLEET_FILE), "fleet", None, True, (), kind="cluster"))
    for c in verdict.clusters:
        found = by_file(c.problems)
        nodes_file = str(root / c.cluster.path / NODES_FILE)
        found.setdefault(nodes_file, [])
        for file, problems in found.items():
            checked.append(
                Checked(
                    file,
                    c.cluster.name,
                    None,
                    True,
                    tuple(problems),
                    kind="cluster",
                    assignments=c.assignments if file == nodes_file else 0,
                    nodes=c.nodes,
                )
            )
    return 1 + 4 * len(verdict.clusters), checked
