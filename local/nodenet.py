"""The real node's network: one bridge the setup creates, one /32 node address, pod and service routes.

Nothing here may reach any address but loopback and what this module creates. So:
- the bridge `migops0` carries the node address 10.99.0.1/32 (kubelet refuses a loopback node IP, and
  this kernel has no dummy-interface driver) and is the CNI bridge the pods attach to;
- the host routes the pod range and the service range to that bridge, so a Service address with no
  kube-proxy rule behind it goes nowhere instead of leaving through the machine's own interface
  (which carries the default route);
- pods get routes only to their own range (which holds the node address) and to the service range:
  no default route;
- forwarding is switched on for packets arriving on `migops0` only (a pod reaching a Service that
  kube-proxy sends to another pod), never globally; the setting goes with the bridge.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

BRIDGE = "migops0"
NODE_IP = "10.99.0.1"
POD_CIDR = "10.99.0.0/24"
POD_RANGE = ("10.99.0.10", "10.99.0.250")
CNI_NETWORK = "migops"
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian containernetworking-plugins


class NetworkError(RuntimeError):
    """The bridge, an address or a route could not be set up; carries the command's error."""


@dataclass(frozen=True)
class Network:
    """Where the real node lives on the network: its bridge, address, pod range and the service range."""

    service_cidr: str
    bridge: str = BRIDGE
    node_ip: str = NODE_IP
    pod_cidr: str = POD_CIDR


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def bridge_exists(name: str = BRIDGE) -> bool:
    return _ip("link", "show", "dev", name, check=False).returncode == 0


def create(net: Network) -> None:
    """Create the bridge with the node address and the host routes (fails if the bridge exists)."""
    _ip("link", "add", net.bridge, "type", "bridge")
    try:
        _ip("addr", "add", f"{net.node_ip}/32", "dev", net.bridge)
        _ip("link", "set", net.bridge, "up")
        for cidr in (net.pod_cidr, net.service_cidr):
            _ip("route", "add", cidr, "dev", net.bridge, "src", net.node_ip)
        Path(f"/proc/sys/net/ipv4/conf/{net.bridge}/forwarding").write_text("1\n")
    except BaseException:
        delete(net.bridge)
        raise


def delete(name: str = BRIDGE) -> None:
    """Remove the bridge (its address, routes and forwarding setting go with it); absent is fine."""
    if bridge_exists(name):
        _ip("link", "del", name)


def cni_conflist(net: Network, ipam_dir: Path) -> str:
    """The CNI network: pods on the bridge, addresses from host-local (state in `ipam_dir`), routes only to
    the pod range (on-link, holds the node address) and the service range via the node address."""
    start, end = POD_RANGE
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": CNI_NETWORK,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": net.bridge,
                    # isGateway would put a /24 on the bridge and turn on forwarding globally: the setup did
                    # what is needed, narrower.
                    "isGateway": False,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(ipam_dir),
                        "ranges": [
                            [{"subnet": net.pod_cidr, "rangeStart": start, "rangeEnd": end, "gateway": net.node_ip}]
                        ],
                        "routes": [{"dst": net.service_cidr}],
                    },
                }
            ],
        },
        indent=2,
    )
