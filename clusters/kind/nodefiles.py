"""The files this project adds to kind's own in a node image: the image import at boot and the CNI.

:data:`IMPORT_SCRIPT` imports the component images (``/kind/images/*.tar``, made by
:mod:`clusters.kind.nodeimage`) into containerd before the kubelet starts, once per node.

:data:`CNI_SCRIPT` is the network without images from outside: each node gives its pods
``10.244.<N>.0/24`` (``N``: the last byte of its address on kind's network) through the ``ptp``
and ``host-local`` plugins (Debian's), and routes every other ``10.244.<M>.0/24`` to the address
ending in ``M``, the way kindnetd routes the pod ranges between nodes. So a cluster holds at most
253 nodes of one ``/24``: plenty for the suite. kind's default CNI step then applies
:data:`CNI_MANIFEST`, a ConfigMap that only says so. Both scripts run only inside a node.
"""

from __future__ import annotations

__all__ = ["CNI_MANIFEST", "CNI_SCRIPT", "CNI_UNIT", "IMPORT_SCRIPT", "IMPORT_UNIT", "KUBELET_DROPIN"]

IMPORT_SCRIPT = """#!/bin/sh
# Import the node image's component images into containerd (once per node: /var outlives restarts).
set -eu
marker=/var/lib/drac-images/$(cat /kind/images/digest)
[ -e "$marker" ] && exit 0
for i in $(seq 1 60); do ctr version >/dev/null 2>&1 && break; sleep 1; done
for archive in /kind/images/*.tar; do
  echo "importing $archive"
  ctr -n k8s.io images import --label io.cri-containerd.pinned=pinned "$archive"
done
mkdir -p /var/lib/drac-images && touch "$marker"
"""

IMPORT_UNIT = """[Unit]
Description=Import the node image's component images into containerd
After=containerd.service
Requires=containerd.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/kind/bin/drac-import-images.sh

[Install]
WantedBy=multi-user.target
"""

_CONFLIST = """{
  "cniVersion": "0.3.1",
  "name": "drac-ptp",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "mtu": 1500,
      "ipam": {
        "type": "host-local",
        "dataDir": "/run/cni-ipam-state",
        "routes": [{"dst": "0.0.0.0/0"}],
        "ranges": [[{"subnet": "10.244.OWN.0/24"}]]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
"""

CNI_SCRIPT = (
    """#!/bin/sh
# A ptp pod network per node and routes to the other nodes' pod ranges (see clusters.kind.nodefiles).
set -eu
address=$(ip -4 -o addr show dev eth0 | awk '{print $4}' | head -n 1)
ip=${address%/*}
prefix=${ip%.*}
own=${ip##*.}
[ -n "$prefix" ] && [ -n "$own" ] || { echo "no IPv4 address on eth0" >&2; exit 1; }
mkdir -p /etc/cni/net.d
conflist='"""
    + _CONFLIST
    + """'
printf '%s' "$conflist" | sed "s/OWN/$own/" > /etc/cni/net.d/10-drac-ptp.conflist
for n in $(seq 1 254); do
  [ "$n" = "$own" ] || ip route replace "10.244.$n.0/24" via "$prefix.$n" dev eth0
done
"""
)

CNI_UNIT = """[Unit]
Description=Pod network of this node (ptp, routes to the other nodes)
Before=kubelet.service containerd.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/kind/bin/drac-cni.sh

[Install]
WantedBy=multi-user.target
"""

KUBELET_DROPIN = """[Unit]
Wants=drac-import-images.service drac-cni.service
After=drac-import-images.service drac-cni.service
"""

CNI_MANIFEST = """# The pod network of this node image needs no pods: every node sets it up at boot
# (drac-cni.service). kind applies this file as its default CNI; it only records that.
apiVersion: v1
kind: ConfigMap
metadata:
  name: drac-node-cni
  namespace: kube-system
data:
  cni: "ptp + host-local per node, 10.244.<last byte of the node address>.0/24, routes between nodes"
  podSubnet: "{{ .PodSubnet }}"
"""
