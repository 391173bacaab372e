"""Why gitops refuses a revision: the reasons its errors carry, as conditions and Events show them.

Declared once here; the reconciler reads them from here (never as string copies) to tell a source that
could not be read (worth retrying) from a revision that must not be applied (stalled until a new commit).
"""

from __future__ import annotations

from enum import StrEnum


class SourceReason(StrEnum):
    # SourceError: the repository or a file of it could not be read.
    GIT_UNREACHABLE = "GitUnreachable"
    REF_NOT_FOUND = "RefNotFound"
    GIT_FAILED = "GitFailed"
    FILE_TOO_LARGE = "FileTooLarge"
    # VerificationError: unsigned, badly signed, or signed by a key nobody trusts.
    VERIFICATION_FAILED = "VerificationFailed"
    # RepoError: the revision's files do not make a valid desired state.
    VALIDATION_FAILED = "ValidationFailed"
    STRATEGY_MISMATCH = "StrategyMismatch"
    TOO_MANY_DEFAULTED = "TooManyDefaulted"


# The source could not be read: nothing is known about the revision; the fetch is retried with backoff.
UNREADABLE = frozenset(
    {SourceReason.GIT_UNREACHABLE, SourceReason.REF_NOT_FOUND, SourceReason.GIT_FAILED, SourceReason.FILE_TOO_LARGE}
)
