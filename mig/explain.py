"""What a reason or a rule means and what to do about it: the text of docs/troubleshooting.md.

Each part declares its own beside its reasons and rules (mig/rules.py, gitops/reasons.py,
reconciler/reasons.py, webhook/denials.py, agent/reasons.py); `hack/troubleshooting.py` renders them, and
tests/docs/test_troubleshooting.py fails when a reason or a rule the code can emit has no entry.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Explanation:
    meaning: str  # what happened, in the user's terms
    action: str  # what to do about it
