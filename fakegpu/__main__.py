"""``python -m fakegpu``: the same as the ``fakegpu`` command."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
