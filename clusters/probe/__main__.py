"""``python -m clusters.probe serve ...``: the probe's program on a node."""

from __future__ import annotations

from clusters.probe.cli import main

raise SystemExit(main())
