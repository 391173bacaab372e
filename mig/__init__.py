"""The MIG core: GPU catalogue, mig-parted config parser, validator, placement planner.

No Kubernetes and no I/O beyond reading its own data file: every other migops component calls this
package, and none re-implements a MIG rule.
"""
