"""Run benchmarks: ``python -m benchmarks [NAME ...]``; results go to reports/bench/NAME.json.

Each benchmark module under ``benchmarks/`` defines ``run() -> dict`` and is listed in
``ENTRIES`` below (in order). A benchmark reports figures, never pass/fail.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from pathlib import Path

ENTRIES: list[str] = [
    "fakegpu_calls",
    "fakegpu_cabi",
    "driver_prepare",
    "prepare_compare",
    "driver_slices",
    "driver_chaos",
    "cluster_boot",
    "cluster_scale",
    "conformance_suite",
    "kept_reuse",
    "node_parity",
]
"""Benchmark module names under ``benchmarks/`` in the order they run."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default all: {', '.join(ENTRIES)})")
    parser.add_argument("--out", default="reports/bench", help="directory for the JSON results")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(ENTRIES))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; available: {ENTRIES}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.names or ENTRIES:
        print(f"== bench {name}", flush=True)
        started = time.time()
        result = importlib.import_module(f"benchmarks.{name}").run()
        record = {
            "name": name,
            "started": started,
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "results": result,
        }
        (out / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
        print(json.dumps(result, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
