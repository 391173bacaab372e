"""What was last applied, kept in the cluster (as Flux keeps its last artifact), not only in git.

A ConfigMap `migops-applied-<migsync>` beside the MigSync (owned by it: deleted with it) holds the
revision in force, its two files (config.yaml, nodes.yaml: compressed, the desired labels follow from
them on the nodes of the day), the config's digest, when it was adopted, and the desired label per node
as resolved then. It is written once per adopted revision, before any write of that revision. A fresh
reconciler (its git cache is an emptyDir) whose remote is unreachable, or whose followed branch was
rewritten so that the revision is gone, enforces that record instead of nothing.

The record is only as trusted as the revision it records: it also keeps the commit object (with its
signature) and the tree objects down to the two files. With signatures required, `verify` checks the
signature against the allowed signers and that those objects lead from the revision to exactly the
recorded files; a record that does not verify is never enforced. Who may write it at all is narrowed
by the ValidatingAdmissionPolicy migops-applied-record (manifests/base/reconciler): the reconciler's
ServiceAccount only.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from migops.api.migsync import (
    API_VERSION,
    CONFIG_FILE,
    KIND,
    NODES_FILE,
    RECORD_DIGEST_KEY,
    RECORD_REVISION_KEY,
    TrustPolicy,
    config_text_digest,
    record_name,
)
from migops.gitops.desired import DesiredState
from migops.gitops.repo import RepoSpec, load_repo
from migops.gitops.verify import CommitProof, VerificationError, verify_files

log = logging.getLogger(__name__)

RECORD_KEY = "applied.json.gz"


@dataclass(frozen=True)
class AppliedRecord:
    revision: str
    path: str
    config_text: str
    nodes_text: str
    adopted_at: float  # unix seconds
    targets: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # node -> (config, source)
    proof: CommitProof | None = None  # the commit object and trees (None: an old record, or git lacked it)

    @property
    def config_digest(self) -> str:
        return config_text_digest(self.config_text)

    def spec(self) -> RepoSpec:
        """The revision as parsed from the record (raises RepoError if it no longer parses)."""
        prefix = f"{self.path}/" if self.path else ""
        return load_repo(
            {f"{prefix}{CONFIG_FILE}": self.config_text.encode(), f"{prefix}{NODES_FILE}": self.nodes_text.encode()},
            self.path,
            self.revision,
        )


def verify_record(record: AppliedRecord, policy: TrustPolicy) -> None:
    """With signatures required, is the record the signed revision's own? Raises VerificationError."""
    if not policy.enabled:
        return
    if record.proof is None:
        raise VerificationError(
            f"it holds no signed commit object for revision {record.revision[:12]} (written by hand, or by a "
            "reconciler older than the proof), so nothing ties it to a signature"
        )
    files = {CONFIG_FILE: record.config_text.encode(), NODES_FILE: record.nodes_text.encode()}
    verify_files(record.proof, record.revision, record.path, files, policy)


def record_of(desired: DesiredState, adopted_at: float, proof: CommitProof | None = None) -> AppliedRecord:
    return AppliedRecord(
        desired.revision,
        desired.spec.path,
        desired.spec.config_text,
        desired.spec.nodes_text,
        adopted_at,
        {n: (t.config, t.source) for n, t in desired.targets.items()},
        proof,
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def to_configmap(record: AppliedRecord, namespace: str, migsync: str, owner_uid: str | None) -> dict[str, Any]:
    doc = {
        "revision": record.revision,
        "path": record.path,
        "configText": record.config_text,
        "nodesText": record.nodes_text,
        "adoptedAt": record.adopted_at,
        "targets": {n: list(t) for n, t in record.targets.items()},
    }
    if record.proof is not None:
        doc["commitObject"] = _b64(record.proof.commit)
        doc["trees"] = [_b64(t) for t in record.proof.trees]
    meta: dict[str, Any] = {
        "name": record_name(migsync),
        "namespace": namespace,
        "labels": {"app.kubernetes.io/managed-by": "migops-reconciler"},
    }
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": KIND, "name": migsync, "uid": owner_uid}]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {RECORD_REVISION_KEY: record.revision, RECORD_DIGEST_KEY: record.config_digest},
        "binaryData": {RECORD_KEY: base64.b64encode(gzip.compress(json.dumps(doc).encode(), 6)).decode()},
    }


def from_configmap(obj: Mapping[str, Any]) -> AppliedRecord:
    """Raises ValueError when the record is not one (edited, truncated)."""
    try:
        raw = ((obj.get("binaryData") or {}).get(RECORD_KEY)) or ""
        doc = json.loads(gzip.decompress(base64.b64decode(raw)))
        proof = (
            CommitProof(
                base64.b64decode(doc["commitObject"], validate=True),
                tuple(base64.b64decode(t, validate=True) for t in doc.get("trees") or ()),
            )
            if doc.get("commitObject")
            else None
        )
        record = AppliedRecord(
            str(doc["revision"]),
            str(doc.get("path") or ""),
            str(doc["configText"]),
            str(doc["nodesText"]),
            float(doc.get("adoptedAt") or 0),
            {str(n): (str(t[0]), str(t[1])) for n, t in (doc.get("targets") or {}).items()},
            proof,
        )
    except (ValueError, KeyError, TypeError, OSError, EOFError) as exc:
        raise ValueError(f"not an applied record: {exc}") from None
    if (obj.get("data") or {}).get(RECORD_DIGEST_KEY) not in (None, record.config_digest):
        raise ValueError("configDigest does not match the recorded config.yaml")
    return record


def read_record(api: k8s.ApiClient, namespace: str, migsync: str) -> AppliedRecord | None:
    """The record, or None (none yet, unreadable, or not allowed: said in the log)."""
    try:
        return load_record(api, namespace, migsync)
    except ValueError as exc:
        log.warning("ignoring ConfigMap %s/%s: %s", namespace, record_name(migsync), exc)
    return None


def load_record(api: k8s.ApiClient, namespace: str, migsync: str) -> AppliedRecord | None:
    """The record, or None (none yet, or not readable: said in the log); ValueError when the
    ConfigMap is there but holds no record (edited by hand, truncated)."""
    try:
        obj = k8s.CoreV1Api(api).read_namespaced_config_map(
            record_name(migsync), namespace, _preload_content=False, _request_timeout=30
        )
    except ApiException as exc:
        if exc.status != 404:
            log.warning("cannot read the applied record %s/%s: HTTP %s", namespace, record_name(migsync), exc.status)
        return None
    return from_configmap(json.loads(obj.data))
