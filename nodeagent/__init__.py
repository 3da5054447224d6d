"""The node agent: the kubelet's side of the DRA protocol, one process per fake node.

``python -m nodeagent --kubeconfig K --node-name N --root DIR`` (docs/interfaces.md). It keeps
a Node and its Lease alive, registers DRA plugins from the node's registry dir, prepares the
claims of pods bound to the node, "runs" the pods by writing what each container would see,
and tears them down as the kubelet does. ``driver/`` is the plugin's side of the same protocol;
``draproto`` (the only package of ours this one imports) sits between them.

The package re-exports only :class:`~nodeagent.layout.NodeLayout`, the node's directory
layout, which is what others (``clusters.local``) may use: importing it must not load gRPC or
the Kubernetes client. The program's parts are imported by module path (``nodeagent.agent``,
``nodeagent.settings``, ...); README.md beside this file lists them.
"""

from __future__ import annotations

from nodeagent.layout import NodeLayout

__all__ = ["NodeLayout"]
