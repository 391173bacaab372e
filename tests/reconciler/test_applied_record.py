"""The cluster's applied record is only as trusted as the revision it records: with
signatures required, a restarted reconciler whose HEAD is refused enforces a record only if its commit is
signed by an allowed signer and its files are that commit's; on a real API server, real git, real SSH
signatures. (That only the reconciler's ServiceAccount may write a record at all, the admission policy,
is proven with the manifests in test_manifests.py.)"""

from __future__ import annotations

import uuid
from dataclasses import replace

from gitrepo import CONFIG_YAML, GitRepo, SshKey
from kubernetes import client as k8s
from reconciler_harness import agent_reports, condition, events_for, eventually, labels_of, migsync

from migops.api.migsync import TrustPolicy, record_name
from migops.api.names import MIG_CONFIG_LABEL
from migops.gitops.source import GitSource
from migops.gitops.verify import CommitProof
from migops.kube import ssa
from migops.reconciler.record import AppliedRecord, read_record, to_configmap

NS = "migops-system"


def _pool(pool: str, config: str) -> str:
    return (
        "version: v1\nrollout: {maxUnavailable: '100%'}\nassignments:\n"
        f"  - nodeSelector: {{matchLabels: {{pool: {pool}}}}}\n    config: {config}\n"
    )


def _forge(api, name: str, record: AppliedRecord | dict) -> None:
    """What someone with write access to ConfigMaps in the namespace can do: a record of their own,
    digest recomputed, labels as the reconciler sets them (or a ConfigMap body as it is)."""
    body = to_configmap(record, NS, name, None) if isinstance(record, AppliedRecord) else record
    ssa.apply(api, body, field_manager="someone-else", force=True)


def _rewrite_history(repo: GitRepo, files: dict[str, str], key: SshKey) -> str:
    """A force-push: main becomes one new commit; the old ones are gone from the repository."""
    repo.git("checkout", "-q", "--orphan", "rewritten")
    repo.git("rm", "-rfq", ".")
    head = repo.commit(files, key=key)
    repo.git("branch", "-f", "main", head)
    repo.git("checkout", "-q", "main")
    repo.git("branch", "-D", "rewritten")
    repo.git("reflog", "expire", "--expire=now", "--all")
    repo.git("gc", "-q", "--prune=now")
    return head


def test_with_signatures_required_only_a_verified_record_is_enforced(
    rapi, repo, gpu_nodes, make_reconciler, tmp_path
) -> None:
    alice, mallory = SshKey.make(tmp_path / "keys", "alice"), SshKey.make(tmp_path / "keys", "mallory")
    trust = TrustPolicy("head", allowed_signers=alice.allowed_signers)
    names = gpu_nodes(2, pool="signed-record")
    applied = repo.commit({"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("signed-record", "all-1g.10gb")}, key=alice)
    name = f"t-{uuid.uuid4().hex[:8]}"
    rec = make_reconciler(repo.url, trust=trust, name=name)
    assert rec.sync().outcome == "Applied"
    agent_reports(rapi, CONFIG_YAML, names)
    eventually(lambda: rec.sync(fetch=False).outcome == "InSync")
    genuine = read_record(rapi, NS, name)
    assert genuine is not None and genuine.revision == applied and genuine.proof is not None
    rec.stop()
    # The branch rewritten to one commit signed by a key nobody listed: HEAD is refused, and the
    # revision in force is in git no more. A restarted reconciler has only the cluster's record.
    refused = _rewrite_history(
        repo, {"config.yaml": CONFIG_YAML, "nodes.yaml": _pool("signed-record", "five-1g-one-2g")}, mallory
    )
    core = k8s.CoreV1Api(rapi)

    def restart(tag: str):
        core.patch_node(names[0], {"metadata": {"labels": {MIG_CONFIG_LABEL: "all-disabled"}}})  # a hand edit
        return make_reconciler(repo.url, trust=trust, name=name, cache_dir=tmp_path / f"cache-{tag}")

    forged_nodes = _pool("signed-record", "all-3g.40gb")
    forger = GitSource(repo.url, "main", cache_dir=tmp_path / "forger")
    forger.fetch()
    forgeries = {
        # Another revision and files, no commit object.
        "no commit": (
            replace(genuine, revision="2" * 40, nodes_text=forged_nodes, proof=None),
            "holds no signed commit object for revision 222222222222",
        ),
        # The genuine signed commit and its trees, with other files.
        "other files": (
            replace(genuine, nodes_text=forged_nodes),
            f"nodes.yaml as kept is not the file commit {applied[:12]} holds",
        ),
        # A real commit with its own files, signed by a key that is not allowed.
        "untrusted key": (
            replace(
                genuine,
                revision=refused,
                nodes_text=_pool("signed-record", "five-1g-one-2g"),
                proof=CommitProof(forger.commit_object(refused), forger.path_trees(refused, "")),
            ),
            "is signed by an SSH key that is not in the allowed signers",
        ),
        # Not a record at all: its digest does not match its config.yaml.
        "bad digest": (
            {**to_configmap(genuine, NS, name, None), "data": {"configDigest": "sha256:" + "0" * 64}},
            "configDigest does not match the recorded config.yaml",
        ),
    }
    for tag, (forged, why) in forgeries.items():
        _forge(rapi, name, forged)
        fresh = restart(tag.replace(" ", "-"))
        result = fresh.sync()
        assert result.outcome == "Unverified" and result.writes == 0, (tag, result)
        labels = labels_of(rapi, names)
        assert labels[names[0]][MIG_CONFIG_LABEL] == "all-disabled", tag  # nothing of the record applied
        assert labels[names[1]][MIG_CONFIG_LABEL] == "all-1g.10gb", tag
        fresh.flush_status()
        status = migsync(rapi, name)
        available = condition(status, "AppliedRevisionAvailable")
        assert available["status"] == "False" and available["reason"] == "AppliedRecordRefused", tag
        assert why in available["message"] and "nothing of it is applied" in available["message"], tag
        assert f"ConfigMap {NS}/{record_name(name)}" in available["message"]
        ready = condition(status, "Ready")
        assert ready["status"] == "False" and ready["reason"] == "VerificationFailed", tag
        assert "nothing has been applied" in ready["message"] and why in ready["message"], tag
        eventually(lambda: [e for e in events_for(rapi, name, "AppliedRecordRefused", NS) if why in e.message])
        fresh.stop()
    # The genuine record, as the reconciler wrote it, verifies: it is enforced (the hand edit is put back).
    _forge(rapi, name, genuine)
    fresh = restart("genuine")
    result = fresh.sync()
    assert result.outcome == "Unverified" and result.revision == applied, result
    assert labels_of(rapi, names)[names[0]][MIG_CONFIG_LABEL] == "all-1g.10gb"
    fresh.flush_status()
    assert condition(migsync(rapi, name), "AppliedRevisionAvailable")["reason"] == "RevisionVanished"
