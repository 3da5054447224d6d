"""The node agent: one process per fake node that plays the kubelet's DRA part.

``python -m clusters.local.agent --kubeconfig K --node-name N --root DIR``
(docs/interfaces.md). It keeps a Node and its Lease alive, registers DRA
plugins from ``DIR/kubelet/plugins_registry``, prepares the claims of pods bound
to the node, "runs" the pods by writing what each container would see, and
tears them down as the kubelet does.
"""

from __future__ import annotations

from clusters.local.agent.agent import Agent
from clusters.local.agent.kube import Kube, RestKube
from clusters.local.agent.settings import Settings, parse_args

__all__ = ["Agent", "Kube", "RestKube", "Settings", "parse_args"]
