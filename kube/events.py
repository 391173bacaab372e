"""Core v1 Events: what `kubectl describe` and `kubectl get events` show a person.

An Event is best effort by design (the API server may drop or rate-limit them): a failure to record
one is logged, never raised, so reporting can never break the work it reports on.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from kubernetes import client as k8s

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
MAX_MESSAGE = 1024  # the API server rejects longer event notes


def record(
    api: k8s.ApiClient,
    involved: Mapping[str, Any],
    reason: str,
    message: str,
    *,
    type: EventType = "Normal",
    controller: str,
    action: str | None = None,
) -> bool:
    """Create an Event about `involved` (an object dict or a reference with apiVersion, kind, name[,
    namespace, uid]). Cluster-scoped objects' events go to `default`, as the kubelet's Node events do."""
    body = event_body(involved, reason, message, type=type, controller=controller, action=action)
    meta = involved.get("metadata") or involved
    try:
        create(api, body)
        return True
    except Exception as exc:  # noqa: BLE001 - best effort
        log.warning("could not record event %s on %s/%s: %s", reason, involved.get("kind"), meta.get("name"), exc)
        return False


def create(api: k8s.ApiClient, body: Mapping[str, Any]) -> None:
    """Send one Event made by `event_body` (raises what the client raises)."""
    k8s.CoreV1Api(api).create_namespaced_event(body["metadata"]["namespace"], body)


def event_body(
    involved: Mapping[str, Any],
    reason: str,
    message: str,
    *,
    type: EventType = "Normal",
    controller: str,
    action: str | None = None,
) -> dict[str, Any]:
    """The Event `record` sends: a name of its own, so sending it again is harmless (409)."""
    meta = involved.get("metadata") or involved
    namespace = meta.get("namespace") or "default"
    now = datetime.now(UTC)
    name = f"{meta.get('name')}.{uuid.uuid4().hex[:12]}"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            k: v
            for k, v in {
                "apiVersion": involved.get("apiVersion"),
                "kind": involved.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
            }.items()
            if v
        },
        "reason": reason,
        "message": message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "...",
        "type": type,
        "firstTimestamp": now.isoformat(),
        "lastTimestamp": now.isoformat(),
        "count": 1,
        "eventTime": now.isoformat(timespec="microseconds"),
        "action": action or reason,
        "reportingComponent": controller,
        "reportingInstance": f"{controller}-{socket.gethostname()}"[:128],
        "source": {"component": controller},
    }
