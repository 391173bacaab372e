"""The reconciler's edges, handed to every step (`Ports`): what it reads of the cluster (informers),
what it writes (an `apply.WritePort`: the API writer, or `apply.NullWriter` for `migops diff`), the repository,
Events and metrics. Steps read and write the cluster through these only and never change a port's
state; what lasts between syncs is `state.SyncState`, a value."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client as k8s

from migops.api import migsync
from migops.api.migsync import SyncSpec, TrustPolicy, VerifyMode, parse_spec
from migops.api.objects import MigSettings, settings_from_policies
from migops.gitops.desired import FitCache
from migops.kube import clusterpolicy
from migops.kube.cache import Cache, Changes
from migops.kube.informer import Handler, Informer
from migops.reconciler.apply import WritePort
from migops.reconciler.changes import NodeUpdate, node_change
from migops.reconciler.metrics import Metrics
from migops.reconciler.plan import trim_for_reconciler
from migops.reconciler.recorder import EventRecorder
from migops.reconciler.revisions import Revisions
from migops.reconciler.status_writer import StatusWriter

NODES = "nodes/trimmed-for-reconciler"  # the cache's key of the Nodes as the reconciler reads them


@dataclass(frozen=True)
class Options:
    """Who this reconciler is and how it may write (fixed for its life)."""

    name: str
    namespace: str
    dry_run: bool = False
    write_status: bool = True
    enforce_last_good: bool = True  # False (--once): a bad commit means no writes at all
    # Put the finalizer on the MigSync (a running reconciler honours it); --once only honours one
    # already there, as nothing would be left running to release the nodes on a later deletion.
    finalizer: bool = True

    @property
    def owner(self) -> str:
        """The managed-by annotation on every node we give a config."""
        return f"{self.namespace}/{self.name}"


class ClusterView:
    """What the informers show: the Nodes, our MigSync, the ClusterPolicies, the MIG ConfigMap -- from
    the process's `kube.cache.Cache`. Node events are recorded in `node_changes` (on the informer's
    thread, which touches nothing a sync reads) for the next sync to fold in; every event wakes the loop."""

    def __init__(
        self,
        api: k8s.ApiClient,
        options: Options,
        *,
        spec: SyncSpec | None,
        trust: TrustPolicy | None,
        wake: Callable[[], None],
        cache: Cache | None = None,
    ) -> None:
        self._api = api
        self._key = f"{options.namespace}/{options.name}"
        self._fixed_spec = spec  # None: read it from the MigSync object
        # Keys the Deployment mounts (--allowed-signers/--trusted-key beside a MigSync): added to the
        # MigSync's own, and verification on whatever its spec says -- who may edit the MigSync cannot
        # turn off what whoever deploys the reconciler requires.
        self._trust_floor = trust
        self._wake = wake
        self._own_cache = cache is None  # stopped with the view only when it is the view's own
        self.cache = cache if cache is not None else Cache()
        self.node_changes: Changes[NodeUpdate] = Changes(node_change, wake)
        self.nodes = self.cache.informer(
            NODES,
            lambda h: Informer(k8s.CoreV1Api(api).list_node, name="nodes", transform=trim_for_reconciler, handler=h),
        )
        self.cache.listen(NODES, self.node_changes.record)  # (which wakes the loop too)
        custom = k8s.CustomObjectsApi(api)
        # Optional CRDs: watched even while not installed (an install later is seen within seconds).
        self.migsync = self._watch(
            f"migsync/{self._key}",
            lambda h: Informer(
                custom.list_namespaced_custom_object,
                migsync.GROUP,
                migsync.VERSION,
                options.namespace,
                migsync.PLURAL,
                name="migsync",
                field_selector=f"metadata.name={options.name}",
                handler=h,
                missing_ok=True,
                backoff=(0.2, 5.0),
            ),
        )
        self.policies = self._watch(
            "clusterpolicies", lambda h: clusterpolicy.informer(api, handler=h, backoff=(0.2, 5.0))
        )
        self._configmaps: dict[tuple[str, str], Informer] = {}

    def _watch(self, key: str, make: Callable[[Handler], Informer]) -> Informer:
        informer = self.cache.informer(key, make)
        self.cache.listen(key, self._woken)
        return informer

    def _woken(self, kind: str, obj: dict[str, Any]) -> None:
        self._wake()

    def start(self, timeout: float) -> None:
        for inf in (self.nodes, self.migsync, self.policies):
            inf.start()
        for inf in (self.migsync, self.policies, self.nodes):
            if not inf.wait_synced(timeout):
                raise TimeoutError(f"could not list {inf.name}: {inf.last_error}")

    def stop(self) -> None:
        if self._own_cache:
            self.cache.stop()

    @property
    def synced(self) -> bool:
        return self.nodes.synced and all(i.synced for i in list(self._configmaps.values()))  # (read by /readyz)

    def migsync_object(self) -> dict[str, Any] | None:
        return self.migsync.get(self._key)

    def current_spec(self) -> SyncSpec:
        return self.spec_of(self.migsync_object())

    def spec_of(self, obj: dict[str, Any] | None) -> SyncSpec:
        """The spec `obj` (a read of the MigSync) puts in force; ValueError when it has none."""
        if self._fixed_spec is not None:
            return self._fixed_spec
        if obj is None:
            raise ValueError(f"MigSync {self._key} not found")
        spec = parse_spec(obj)
        return spec if self._trust_floor is None else with_trust_floor(spec, self._trust_floor)

    def settings(self) -> MigSettings:
        return settings_from_policies(self.policies.items().values())

    def configmap_seen(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The MIG ConfigMap as the (lazily started) informer shows it; None when it does not exist."""
        key = (namespace, name)
        inf = self._configmaps.get(key)
        if inf is None:
            inf = self._watch(
                f"configmap/{namespace}/{name}",
                lambda h: Informer(
                    k8s.CoreV1Api(self._api).list_namespaced_config_map,
                    namespace,
                    name=f"configmap-{name}",
                    field_selector=f"metadata.name={name}",
                    handler=h,
                ),
            )
            self._configmaps[key] = inf.start()
            inf.wait_synced(30)
        return inf.get(f"{namespace}/{name}")


def with_trust_floor(spec: SyncSpec, floor: TrustPolicy) -> SyncSpec:
    """The spec with the floor's keys added to its own and verification required (mode head)."""
    own = spec.trust
    signers = "\n".join(t for t in (own.allowed_signers.strip(), floor.allowed_signers.strip()) if t)
    keys = tuple(dict.fromkeys((*own.openpgp_keys, *floor.openpgp_keys)))
    return replace(spec, trust=TrustPolicy(VerifyMode.HEAD, signers, keys))


@dataclass(frozen=True)
class Ports:
    """Everything a step may touch besides the state and its run."""

    options: Options
    cluster: ClusterView
    writer: WritePort
    revisions: Revisions
    fit_cache: FitCache  # verdicts of a pure function, safe to share between threads
    events: EventRecorder
    metrics: Metrics
    status: StatusWriter
