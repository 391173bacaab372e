"""The webhook's certificate at its start (migops.certs.bootstrap), against the real API server.

A fresh install: no Secret, webhook configurations without a caBundle. Two replicas starting at once
must end with one CA, in the Secret and in every caBundle, and serve certificates that CA signed;
a configuration created a moment later still gets its caBundle; a later start (or the CronJob's
`migops certs rotate`) finds nothing due and changes nothing.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from kubernetes import client as k8s
from kubernetes.client import ApiClient

from migops.certs import bootstrap
from migops.certs.publish import SecretStore
from migops.certs.rotation import DirectoryStore, rotate, service_dns_names


def _configuration(kind: str, name: str, namespace: str) -> dict:
    """A registration that matches nothing other tests write (a resource of a group nobody serves)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": f"{w}.bootstrap.test.migops.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "clientConfig": {"service": {"name": "migops-webhook", "namespace": namespace}},
                "rules": [
                    {
                        "apiGroups": ["bootstrap.test.migops.io"],
                        "apiVersions": ["v1"],
                        "resources": ["widgets"],
                        "operations": ["CREATE"],
                    }
                ],
            }
            for w in ("a", "b")
        ],
    }


def _create(api: ApiClient, body: dict) -> None:
    admission = k8s.AdmissionregistrationV1Api(api)
    create = {
        "ValidatingWebhookConfiguration": admission.create_validating_webhook_configuration,
        "MutatingWebhookConfiguration": admission.create_mutating_webhook_configuration,
    }[body["kind"]]
    create(body)


def _bundles(api: ApiClient, name: str) -> list[bytes]:
    admission = k8s.AdmissionregistrationV1Api(api)
    found = [
        *admission.read_validating_webhook_configuration(name).webhooks,
        *admission.read_mutating_webhook_configuration(name).webhooks,
    ]
    return [base64.b64decode(w.client_config.ca_bundle or "") for w in found]


@pytest.fixture
def configurations(admin: ApiClient) -> Iterator[str]:
    name = f"bootstrap-{uuid.uuid4().hex[:8]}"
    yield name
    admission = k8s.AdmissionregistrationV1Api(admin)
    for delete in (admission.delete_validating_webhook_configuration, admission.delete_mutating_webhook_configuration):
        try:
            delete(name)
        except k8s.exceptions.ApiException as exc:
            assert exc.status == 404


def _settings(namespace: str, configurations: str, wait: float = 5.0) -> bootstrap.Settings:
    return bootstrap.Settings(namespace=namespace, configurations=(configurations,), wait_for_configurations=wait)


def test_two_replicas_on_a_fresh_install_agree_on_one_ca(
    admin: ApiClient, namespace: str, configurations: str, tmp_path: Path
) -> None:
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        _create(admin, _configuration(kind, configurations, namespace))
    served: dict[int, Path] = {}
    errors: list[BaseException] = []

    def replica(i: int) -> None:
        try:
            served[i] = bootstrap.ensure(admin, _settings(namespace, configurations), tmp_path / f"pod{i}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    secret = SecretStore(admin, namespace, "migops-webhook-tls").load()
    assert secret.ca is not None and secret.serving is not None and secret.bundle == secret.ca.cert_pem
    ca = x509.load_pem_x509_certificate(secret.ca.cert_pem)
    assert _bundles(admin, configurations) == [secret.ca.cert_pem] * 4
    for i, pem in served.items():
        assert pem == tmp_path / f"pod{i}" / "tls.pem"
        own = DirectoryStore(tmp_path / f"pod{i}").load()
        assert own.ca is None, "the CA's key stays in the Secret, never in a pod's scratch directory"
        leaf = x509.load_pem_x509_certificate(own.serving.cert_pem)
        leaf.verify_directly_issued_by(ca)
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert set(sans.get_values_for_type(x509.DNSName)) == set(service_dns_names("migops-webhook", namespace))


def test_a_later_start_and_the_cronjob_change_nothing(
    admin: ApiClient, namespace: str, configurations: str, tmp_path: Path
) -> None:
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        _create(admin, _configuration(kind, configurations, namespace))
    bootstrap.ensure(admin, _settings(namespace, configurations), tmp_path / "first")
    core = k8s.CoreV1Api(admin)
    version = core.read_namespaced_secret("migops-webhook-tls", namespace).metadata.resource_version
    bootstrap.ensure(admin, _settings(namespace, configurations), tmp_path / "second")
    # What the CronJob runs (`migops certs rotate` with its defaults): the same SANs, so nothing is due.
    result = rotate(
        SecretStore(admin, namespace, "migops-webhook-tls"),
        dns_names=service_dns_names("migops-webhook", namespace),
        ip_addresses=["127.0.0.1"],
        publish=lambda bundle: None,
    )
    assert result.steps == []
    assert core.read_namespaced_secret("migops-webhook-tls", namespace).metadata.resource_version == version
    assert (tmp_path / "first" / "tls.pem").read_bytes() == (tmp_path / "second" / "tls.pem").read_bytes()


def test_configurations_created_after_the_pod_started_get_the_bundle(
    admin: ApiClient, namespace: str, configurations: str, tmp_path: Path
) -> None:
    def later() -> None:
        time.sleep(2.0)
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            _create(admin, _configuration(kind, configurations, namespace))

    creator = threading.Thread(target=later)
    creator.start()
    began = time.monotonic()
    bootstrap.ensure(admin, _settings(namespace, configurations, wait=20.0), tmp_path)
    creator.join(10)
    assert time.monotonic() - began < 15
    ca = SecretStore(admin, namespace, "migops-webhook-tls").load().ca
    assert _bundles(admin, configurations) == [ca.cert_pem] * 4


def test_a_refused_write_fails_at_once(
    client_for, kubeconfig_for, namespace: str, configurations: str, tmp_path: Path
) -> None:
    """An identity without the Secret grant: a clear 403, not a retry loop until the probe kills it."""
    nobody = client_for(kubeconfig_for("nobody"))
    began = time.monotonic()
    with pytest.raises(k8s.exceptions.ApiException) as caught:
        bootstrap.ensure_at_start(nobody, _settings(namespace, configurations), tmp_path, patience=30)
    assert caught.value.status == 403 and time.monotonic() - began < 10
