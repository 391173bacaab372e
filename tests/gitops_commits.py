"""Config texts the GitOps tools' tests (tests/flux, tests/argocd) commit: NVIDIA-like configs with one
config added that the webhook must deny for a placement or a profile, one it must admit, and the words
of the denial as each tool reports it."""

from __future__ import annotations

from gitrepo import CONFIG_YAML

UNPLACEABLE = (
    CONFIG_YAML
    + """\
  unplaceable:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
        "1g.10gb": 1
"""
)
UNKNOWN_PROFILE = (
    CONFIG_YAML
    + """\
  typo:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.9gb": 7
"""
)
MORE = (
    CONFIG_YAML
    + """\
  all-2g.20gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "2g.20gb": 3
"""
)
DENIED = 'admission webhook "configmaps.validate.migops.io" denied the request'
