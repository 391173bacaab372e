"""The webhook's certificate at its own start: a GitOps install needs no manual step.

Each webhook pod, before serving (the container's gunicorn config, in the master process), brings
Secret migops-webhook-tls to a valid CA + serving certificate (creating it on a fresh install,
renewing what is due, as `migops certs rotate` does), writes the caBundle into its webhook
configurations, and copies the serving pair into its own scratch directory. It serves that copy until
the kubelet has mounted the Secret (an optional volume: a fresh install's pods start before the
Secret exists), then the mounted files, which the kubelet keeps current when the CronJob renews them.
Kyverno's and Gatekeeper's webhooks bootstrap the same way.

Two replicas (and the CronJob) may start at once: the Secret is created with a plain create (a second
creator gets 409 and uses the winner's certificates) and updated with its resourceVersion as a
precondition (a loser reloads and finds nothing due), so every replica serves from the one CA that
the caBundle holds. Publishing the bundle is a server-side apply of the same value: a no-op when
nothing changed, and it fills in configurations created after the Secret (an Argo CD sync wave).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from migops.api.names import CERTS_MANAGER
from migops.certs.publish import KINDS, material_from_secret, publish_ca_bundle, secret_body
from migops.certs.rotation import DirectoryStore, Material, rotate, service_dns_names
from migops.kube import ssa

log = logging.getLogger("migops.certs.bootstrap")


class Conflict(Exception):
    """Another writer changed the Secret between our read and our write."""


@dataclass
class GuardedSecretStore:
    """SecretStore's layout, written with optimistic concurrency: create when it was absent at load,
    else apply with the loaded resourceVersion as a precondition."""

    api: k8s.ApiClient
    namespace: str
    name: str
    _version: str | None = field(default=None, init=False)

    def load(self) -> Material:
        try:
            secret = k8s.CoreV1Api(self.api).read_namespaced_secret(self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                self._version = None
                return Material()
            raise
        self._version = secret.metadata.resource_version
        return material_from_secret(secret)

    def save(self, material: Material) -> None:
        body = secret_body(self.name, self.namespace, material)
        metadata = body["metadata"]
        try:
            if self._version is None:
                created = k8s.CoreV1Api(self.api).create_namespaced_secret(
                    self.namespace, body, field_manager=CERTS_MANAGER
                )
                self._version = created.metadata.resource_version
            else:
                metadata["resourceVersion"] = self._version
                applied = ssa.apply(self.api, body, field_manager=CERTS_MANAGER, force=True)
                self._version = applied["metadata"]["resourceVersion"]
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(f"Secret {self.namespace}/{self.name} changed meanwhile") from None
            raise


@dataclass(frozen=True)
class Settings:
    namespace: str  # the webhook's: its Secret and its Service live there
    secret: str = "migops-webhook-tls"
    service: str = "migops-webhook"
    configurations: Sequence[str] = ("migops-webhook",)
    # The SANs `migops certs rotate` (the CronJob) gives by default: the same set, or each would
    # re-issue what the other wrote.
    ip_addresses: Sequence[str] = ("127.0.0.1",)
    wait_for_configurations: float = 30.0  # a fresh apply creates them beside the Deployment
    attempts: int = 5


def ensure_at_start(api: k8s.ApiClient, settings: Settings, scratch: Path, *, patience: float = 45.0) -> Path:
    """`ensure`, retried while the API server cannot be reached yet (a pod's first seconds: the
    Service's endpoints, a restarting API server). A refusal (403: RBAC) fails at once."""
    import urllib3

    deadline = time.monotonic() + patience
    while True:
        try:
            return ensure(api, settings, scratch)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            status = getattr(exc, "status", None)
            if (status is not None and 0 < status < 500) or time.monotonic() >= deadline:
                raise
            log.warning("API server not answering yet (%s); retrying", exc)
            time.sleep(2.0)


def ensure(
    api: k8s.ApiClient, settings: Settings, scratch: Path, *, sleep: Callable[[float], None] = time.sleep
) -> Path:
    """Make the Secret valid, publish its bundle, copy the serving pair to `scratch`/tls.pem (key and
    certificate in one file, replaced by one rename); return that file."""
    store = GuardedSecretStore(api, settings.namespace, settings.secret)
    dns = service_dns_names(settings.service, settings.namespace)
    for attempt in range(settings.attempts):
        try:
            # No settle: a pod that renews the CA serves from the new one at once; the CronJob (which
            # waits) renews long before this is due, so a pod gets here only after a long outage.
            result = rotate(store, dns_names=dns, ip_addresses=settings.ip_addresses, publish=lambda bundle: None)
            break
        except Conflict as exc:
            log.info("%s; reloading (attempt %d)", exc, attempt + 1)
            sleep(0.2 * (attempt + 1))
    else:
        raise RuntimeError(f"Secret {settings.namespace}/{settings.secret} kept changing under us")
    for step in result.steps:
        log.info("certificate: %s", step)
    material = result.material
    _publish(api, material.bundle, settings, sleep)
    DirectoryStore(scratch).save(Material(None, material.serving, material.bundle))
    return DirectoryStore(scratch).serving_file


def _publish(api: k8s.ApiClient, bundle: bytes, settings: Settings, sleep: Callable[[float], None]) -> None:
    deadline = time.monotonic() + settings.wait_for_configurations
    want = len(KINDS) * len(settings.configurations)
    while True:
        written = publish_ca_bundle(api, bundle, list(settings.configurations))
        if len(written) >= want or time.monotonic() >= deadline:
            break
        sleep(1.0)
    if written:
        log.info("caBundle written to %s", ", ".join(written))
    else:
        log.warning(
            "no webhook configuration named %s exists yet: its caBundle is set by the next "
            "webhook start or CronJob run",
            ", ".join(settings.configurations),
        )
