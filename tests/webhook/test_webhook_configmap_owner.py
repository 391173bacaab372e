"""Git owns the MIG ConfigMap's content while a MigSync manages it: a write of its config.yaml, of the
label that makes it a MIG config, or its deletion, by anyone but the reconciler, is denied [git-owned]
naming the MigSync and the file to change; the reconciler, a suspended MigSync, the
migops.io/unmanaged=true escape hatch and a cluster without MigSync (the webhook alone, the ConfigMap
synced by Flux or Argo CD) are admitted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from webhook_helpers import CM_NAME, CM_NS, DEFAULT_CONFIG, configmap, review

from migops.webhook import configmaps
from migops.webhook.admission import parse_review
from migops.webhook.state import DEFAULT_RECONCILER_USER, Snapshot

POLICY = {
    "metadata": {"name": "cluster-policy"},
    "spec": {"mig": {"strategy": "mixed"}},
    "status": {"namespace": CM_NS},
}
SYNC = {
    "metadata": {"name": "migops", "namespace": "migops-system"},
    "spec": {"url": "https://git.example/mig.git", "ref": "main", "path": "clusters/prod"},
}
EDITED = DEFAULT_CONFIG.replace("all-disabled:", "all-disabled-renamed:", 1) + "\n"


def snap(*migsyncs: dict) -> Snapshot:
    return Snapshot.build(0, [], [POLICY], [configmap(DEFAULT_CONFIG)], list(migsyncs))


def judge(
    obj, old, operation: str, s: Snapshot, user: str = "system:serviceaccount:argocd:argocd-application-controller"
):
    body = review(obj, operation=operation, old=old)
    body["request"]["userInfo"]["username"] = user
    return configmaps.validate(parse_review(json.loads(json.dumps(body))), s)


def test_an_edit_of_the_content_in_force_is_denied_naming_the_migsync_and_the_file() -> None:
    verdict = judge(configmap(EDITED), configmap(DEFAULT_CONFIG), "UPDATE", snap(SYNC))
    assert not verdict.allowed and verdict.rules == ("git-owned",), verdict
    assert "migops-system/migops" in verdict.message and "clusters/prod/config.yaml" in verdict.message
    assert (
        "https://git.example/mig.git (ref main)" in verdict.message
        and "argocd-application-controller" in verdict.message
    )


def test_deleting_or_unlabelling_it_is_denied_too() -> None:
    labelled = configmap(DEFAULT_CONFIG, labels={"migops.io/mig-config": "true"})
    assert judge(None, configmap(DEFAULT_CONFIG), "DELETE", snap(SYNC)).rules == ("git-owned",)
    assert judge(configmap(DEFAULT_CONFIG), labelled, "UPDATE", snap(SYNC)).rules == ("git-owned",)


def test_who_and_what_stays_admitted() -> None:
    edit = (configmap(EDITED), configmap(DEFAULT_CONFIG), "UPDATE")
    assert judge(*edit, snap(SYNC), user=DEFAULT_RECONCILER_USER).allowed  # the reconciler applies git
    assert judge(*edit, snap()).allowed  # no MigSync: Flux or Argo CD sync the ConfigMap themselves
    assert judge(*edit, snap({**SYNC, "spec": {**SYNC["spec"], "suspend": True}})).allowed
    hatch = configmap(EDITED, labels={"migops.io/unmanaged": "true"})
    assert judge(hatch, configmap(DEFAULT_CONFIG), "UPDATE", snap(SYNC)).allowed
    other = configmap(EDITED, name="prepared", labels={"migops.io/mig-config": "true"})
    assert judge(other, None, "CREATE", snap(SYNC)).allowed  # not the ConfigMap in force
    same = configmap(DEFAULT_CONFIG)
    assert judge(same, configmap(DEFAULT_CONFIG), "UPDATE", snap(SYNC)).allowed  # an unchanged re-apply
    assert CM_NAME == "default-mig-parted-config"


def test_an_unmanaged_configmap_may_be_deleted_and_a_suspended_or_unreadable_migsync_is_judged_as_such() -> None:
    hatch = configmap(DEFAULT_CONFIG, labels={"migops.io/unmanaged": "true"})
    assert judge(None, hatch, "DELETE", snap(SYNC)).allowed  # the label on the object deleted counts
    unlabelling = configmap(EDITED)  # removing the label in a write that changes the content: git's again
    assert judge(unlabelling, hatch, "UPDATE", snap(SYNC)).rules == ("git-owned",)
    broken = {**SYNC, "spec": {**SYNC["spec"], "interval": "soon"}}  # a spec that cannot be read still owns
    verdict = judge(configmap(EDITED), configmap(DEFAULT_CONFIG), "UPDATE", snap(broken))
    assert verdict.rules == ("git-owned",) and "spec.interval" in verdict.message, verdict


def test_an_invalid_edit_is_refused_for_ownership_and_for_its_content_in_one_answer() -> None:
    """The owner and the content's problems together: the same edit made in git would be refused too."""
    typo = DEFAULT_CONFIG.replace("\"1g.10gb\": 7", "\"1g.11gb\": 7", 1)
    assert typo != DEFAULT_CONFIG
    verdict = judge(configmap(typo), configmap(DEFAULT_CONFIG), "UPDATE", snap(SYNC))
    assert not verdict.allowed and verdict.code == 403, verdict
    assert verdict.rules[0] == "git-owned" and "unknown-profile" in verdict.rules, verdict
    assert "1g.11gb" in verdict.message, verdict
