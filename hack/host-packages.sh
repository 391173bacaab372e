#!/usr/bin/env bash
# Install the Debian packages the real node and the image build need, only those missing (idempotent).
#   runc                          the OCI runtime containerd's runc shim calls
#   containernetworking-plugins   CNI bridge + host-local + loopback (/usr/lib/cni)
#   iptables conntrack            kube-proxy's iptables mode; conntrack flushes stale UDP entries
#   iproute2                      the node bridge and its routes
#   gcc libc6-dev                 the pause image: a static C program
#   busybox-static                the tests' tiny workload image
#   mmdebstrap docker.io          the product image: a Debian base rootfs and `docker build` from the Dockerfile
#   redis-server                  Argo CD's cache (`migops local up --argocd`, tests/argocd); never started as a service
# containerd itself is built from its Go module (hack/k8s-binaries.sh), not Debian's 1.6 (see
# docs/development/local-control-plane.md). Needs root and apt for a first install; prints what it installs.
set -euo pipefail
PACKAGES="runc containernetworking-plugins iptables conntrack iproute2 gcc libc6-dev busybox-static mmdebstrap docker.io redis-server"
missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "host-packages: missing Debian packages:$missing (run as root, or: sudo apt-get install$missing)" >&2
  exit 1
fi
echo "host-packages: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
# docker.io's maintainer scripts would start a system dockerd; nothing here wants one running.
policy=/usr/sbin/policy-rc.d
own_policy=""
if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; own_policy=1; fi
trap '[ -n "$own_policy" ] && rm -f "$policy"' EXIT
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing >&2 || {
  apt-get update -q >&2
  # shellcheck disable=SC2086
  apt-get install -y -q --no-install-recommends $missing >&2
}
