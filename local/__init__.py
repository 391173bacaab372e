"""A real local Kubernetes control plane (etcd + kube-apiserver) for tests and the demo.

Modules, one job each: `binaries` finds (or builds) the pinned binaries, `ports` picks free
loopback ports, `process` starts and stops process groups, `watchdog` kills them if their
owner dies, `kubeconfig` writes kubeconfig files, `controlplane` runs etcd + kube-apiserver,
`cluster` seeds GPU nodes and the ClusterPolicy, `state` keeps `migops local`'s state under
$MIGOPS_HOME. This package is imported by the watchdog subprocess, so keep it import-light.
"""
