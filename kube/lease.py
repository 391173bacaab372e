"""Leader election with a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

One holder at a time: a candidate takes the Lease when it is free (no holder, or released) or when the
holder has not renewed it for leaseDurationSeconds, measured on the local clock from when this
candidate last saw the record change (so clock skew between machines does not matter). Every write
is an update with the record's resourceVersion, so two candidates racing for it cannot both win.
The leader renews every `retry_period`; if it cannot renew within `renew_deadline` it stops leading
(and a controller should stop writing at once). On a clean stop it releases the Lease (holder cleared),
so a standby takes over within one retry period instead of a whole lease duration.

The client library's own `leaderelection` package calls sys.exit on a bad configuration and uses the
generated models; this one is a small, testable loop over plain dicts.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api: k8s.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self._coord = k8s.CoordinationV1Api(api)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self.leading = threading.Event()
        self.transitions = 0  # times this candidate became leader

    # ------------------------------------------------------------------------------ the loop
    def run(
        self,
        stop: threading.Event,
        on_started: Callable[[], None] = lambda: None,
        on_stopped: Callable[[], None] = lambda: None,
    ) -> bool:
        """Block until leading (then call on_started) and keep renewing until `stop` is set (release,
        return True) or renewal fails for `renew_deadline` (call on_stopped, return False)."""
        while not stop.is_set():
            if self._try_acquire_or_renew():
                break
            stop.wait(self.retry_period * (1 + 0.2 * random.random()))
        else:
            return True
        self.leading.set()
        self.transitions += 1
        log.info("lease %s/%s: %s is the leader", self.namespace, self.name, self.identity)
        on_started()
        renewed = time.monotonic()
        while not stop.wait(self.retry_period):
            if self._try_acquire_or_renew():
                renewed = time.monotonic()
            elif time.monotonic() - renewed > self.renew_deadline:
                self.leading.clear()
                log.error(
                    "lease %s/%s: could not renew for %.0fs; no longer the leader",
                    self.namespace,
                    self.name,
                    self.renew_deadline,
                )
                on_stopped()
                return False
        self.leading.clear()
        self.release()
        on_stopped()
        return True

    # ------------------------------------------------------------------------------ one attempt
    def _read(self) -> dict[str, Any] | None:
        try:
            resp = self._coord.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=self.retry_period * 2
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        lease: dict[str, Any] = json.loads(resp.data)
        return lease

    def _try_acquire_or_renew(self) -> bool:
        now = _now()
        try:
            lease = self._read()
            if lease is None:
                self._coord.create_namespaced_lease(
                    self.namespace,
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": {
                            "holderIdentity": self.identity,
                            "leaseDurationSeconds": int(self.lease_duration),
                            "acquireTime": now,
                            "renewTime": now,
                            "leaseTransitions": 0,
                        },
                    },
                    _request_timeout=self.retry_period * 2,
                )
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
            if record != self._observed:
                self._observed, self._observed_at = record, time.monotonic()
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            if holder and holder != self.identity and time.monotonic() < self._observed_at + duration:
                return False  # held by someone else, and not expired as far as we have watched it
            mine = holder == self.identity
            spec = {
                **spec,
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "renewTime": now,
                "acquireTime": spec.get("acquireTime") if mine else now,
                "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if mine else 1),
            }
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": lease["metadata"],
                "spec": spec,
            }
            self._coord.replace_namespaced_lease(
                self.name, self.namespace, body, _request_timeout=self.retry_period * 2
            )
            return True
        except ApiException as exc:
            if exc.status != 409:  # 409: another candidate wrote first; simply not us this time
                log.warning("lease %s/%s: %s %s", self.namespace, self.name, exc.status, exc.reason)
            return False
        except Exception as exc:  # noqa: BLE001 - connection errors: try again next period
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False

    def release(self) -> bool:
        """Give the Lease up if we hold it, so a standby takes over at its next attempt."""
        try:
            lease = self._read()
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            spec = {**lease["spec"], "holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _now()}
            self._coord.replace_namespaced_lease(
                self.name,
                self.namespace,
                {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": lease["metadata"], "spec": spec},
                _request_timeout=self.retry_period * 2,
            )
            return True
        except Exception as exc:  # noqa: BLE001 - best effort: the lease expires anyway
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)
            return False
