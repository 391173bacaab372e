"""`migops fleet gitops`: the Argo CD or Flux objects that roll a fleet repo out wave by wave.

Made from fleet.yaml by migops.gitops.fleet_rollout, the builders `migops local up --clusters` and the
fleet tests apply; examples/fleet/gitops/ holds this command's output for examples/fleet.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from migops.cli.usage import EXIT_OK, UsageError

TOOLS = ("argocd", "flux")

_HEADERS = {
    "argocd": (
        "# The Argo CD ApplicationSet rolling this fleet out wave by wave (docs/fleet.md), printed by\n"
        "# `migops fleet gitops --tool argocd` from fleet.yaml. Each cluster is registered by a Secret labelled with\n"
        "# its wave: argocd cluster add CONTEXT --name NAME --label migops.io/fleet-wave=WAVE \\\n"
        "#   --namespace migops-system --cluster-resources=false\n"
    ),
    "flux": (
        "# The Flux objects rolling this fleet out wave by wave (docs/fleet.md), printed by\n"
        "# `migops fleet gitops --tool flux` from fleet.yaml. Each Kustomization applies through its cluster's\n"
        "# kubeconfig: kubectl -n flux-system create secret generic mig-fleet-NAME-kubeconfig --from-file=value=FILE\n"
    ),
}


def register(cmds: argparse._SubParsersAction) -> None:
    gitops = cmds.add_parser(
        "gitops",
        help="the Argo CD ApplicationSet or Flux Kustomizations that roll the fleet out wave by wave",
        description="Print the objects that roll the fleet repo out wave by wave, a canary first: for Argo "
        "CD an ApplicationSet (cluster generator over Secrets labelled migops.io/fleet-wave, RollingSync "
        "steps by wave), for Flux a GitRepository and one Kustomization per cluster (kubeConfig, dependsOn "
        "the wave before, wait on its MigSync). Apply them where the tool runs.",
    )
    gitops.add_argument("--tool", choices=TOOLS, required=True, help="the GitOps tool")
    gitops.add_argument("root", nargs="?", default=".", metavar="DIR", help="the fleet repo (default .)")
    gitops.add_argument(
        "--url", metavar="URL", help="the repository's URL (default: the one every cluster's MigSync names)"
    )
    gitops.add_argument("--branch", default="main", metavar="BRANCH", help="the branch to follow (default main)")
    gitops.set_defaults(func=cmd_gitops)


def cmd_gitops(args: argparse.Namespace) -> int:
    print(render(Path(args.root), args.tool, args.url, args.branch), end="")
    return EXIT_OK


def render(root: Path, tool: str, url: str | None = None, branch: str = "main") -> str:
    """The tool's objects for the fleet repo at `root`, as YAML with a header saying how clusters are
    registered. UsageError for a fleet.yaml with errors, or no single URL."""
    from migops.gitops import fleet_rollout
    from migops.gitops.fleet import FleetProblem, directory_reader, parse_fleet

    problems: list[FleetProblem] = []
    fleet = parse_fleet(directory_reader(root), problems)
    if fleet is None or any(p.severity == "error" for p in problems):
        raise UsageError("; ".join(map(str, problems)))
    url = url or _migsync_url(root, [c.path for c in fleet.clusters])
    try:
        objects = (
            [fleet_rollout.applicationset(fleet, url, branch)]
            if tool == "argocd"
            else fleet_rollout.flux_objects(fleet, url, branch)
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return _HEADERS[tool] + yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True, width=120)


def _migsync_url(root: Path, paths: list[str]) -> str:
    """The URL every cluster's sync/migsync.yaml names; UsageError unless they name one."""
    from migops.gitops.fleet import MIGSYNC_FILE

    urls = set()
    for path in paths:
        file = root / path / MIGSYNC_FILE
        doc = yaml.safe_load(file.read_text()) if file.is_file() else None
        spec = doc.get("spec") if isinstance(doc, dict) else None
        urls.add(spec.get("url") if isinstance(spec, dict) else None)
    if len(urls) != 1 or None in urls:
        raise UsageError(
            f"the clusters' {MIGSYNC_FILE} name {len(urls - {None})} URL(s) (give the repository's with --url)"
        )
    return str(urls.pop())
