"""The MigSync's status as sent: once per change (transition times aside), at most once per
STATUS_MIN_INTERVAL while a rollout moves; the summary (reconciler.summary) alone calls it."""

from __future__ import annotations

import logging
import time
from typing import Any

from migops.api.migsync import API_VERSION, KIND
from migops.reconciler.apply import WriteError, WritePort

log = logging.getLogger(__name__)

STATUS_MIN_INTERVAL = 1.0  # at most one status write per second while a rollout moves


class StatusWriter:
    """Sends the MigSync's status when it differs from what was last sent (transition times aside),
    at most once per STATUS_MIN_INTERVAL unless forced; `pending` says one is owed."""

    def __init__(self, writer: WritePort, name: str, namespace: str) -> None:
        self._writer = writer
        self._name, self._namespace = name, namespace
        self._sent: dict[str, Any] | None = None
        self._at = 0.0
        self.pending = False

    def forget(self) -> None:
        self._sent = None

    def publish(self, body: dict[str, Any], force: bool = False) -> None:
        comparable = {
            **body,
            "conditions": [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in body["conditions"]],
        }
        if comparable == self._sent:
            self.pending = False
            return
        if not force and time.monotonic() - self._at < STATUS_MIN_INTERVAL:
            self.pending = True  # the loop writes it once the interval has passed
            return
        try:
            self._writer.status(
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "metadata": {"name": self._name, "namespace": self._namespace},
                    "status": body,
                }
            )
            self._sent = comparable
            self._at = time.monotonic()
            self.pending = False
        except WriteError as err:
            log.warning("status not written: %s", err)
