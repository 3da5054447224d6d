"""The node probe: a small program on a node that lets the harness, from another machine, reach the
node's driver sockets and CDI specs (the REG rules and CDI checks on an external cluster).

On the node, :class:`ProbeServer` (``python -m clusters.probe serve``) answers a line protocol
(:mod:`~clusters.probe.protocol`, docs/interfaces.md): the registration sockets, the CDI files,
and a byte relay to a socket of the registration or plugins dir, nothing else. Here, a
:class:`NodeMirror` per node keeps a local dir in step with it: a relay socket per node socket,
the CDI files as files, so the harness's gRPC clients and file readers work unchanged. The probe
is reached at an address (:func:`tcp`) or through the API server's port-forward to the pod of
the probe DaemonSet (:func:`daemonset`, :class:`PortForwards`).

Modules: ``protocol`` (the wire format), ``relay`` (byte relays), ``server`` (node side),
``client`` and ``mirror`` (harness side), ``transports``, ``manifest``, ``cli``.
"""

from __future__ import annotations

from clusters.probe.client import ProbeClient
from clusters.probe.manifest import PROBE_PORT, daemonset
from clusters.probe.mirror import NodeMirror
from clusters.probe.server import ProbeServer
from clusters.probe.transports import PortForwards, tcp

__all__ = ["PROBE_PORT", "NodeMirror", "PortForwards", "ProbeClient", "ProbeServer", "daemonset", "tcp"]
