"""Writing a report into its run directory: the one caller of every renderer.

The model (:mod:`conformance.report.model`) knows no renderer; each renderer imports the model;
this module imports them all, so no import goes in a circle.
"""

from __future__ import annotations

import json
from pathlib import Path

from conformance._files import write_atomic
from conformance.report import htmlpage, markdown
from conformance.report.jsonfile import to_dict
from conformance.report.model import Report

__all__ = ["write"]


def write(report: Report, run_dir: Path) -> None:
    """Write ``conformance.json``, ``conformance.md`` and ``index.html`` into ``run_dir``."""
    write_atomic(run_dir / "conformance.json", json.dumps(to_dict(report), indent=2) + "\n")
    write_atomic(run_dir / "conformance.md", markdown.render(report))
    write_atomic(run_dir / "index.html", htmlpage.render(report))
