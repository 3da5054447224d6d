"""``python -m tests.conformance.lane_costs RUN_DIR``: write the lanes' table of expected times
(:data:`conformance.plugin.lanes.COSTS_FILE`) from a run's records, e.g. after a main job run
(``python -m conformance run --profile reference-gpu``) on a 2-core machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conformance.plugin.lanes import COSTS_FILE, costs_of


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not (Path(argv[0]) / "records.jsonl").is_file():
        print("usage: python -m tests.conformance.lane_costs RUN_DIR (a run directory with records.jsonl)")
        return 2
    costs = costs_of(Path(argv[0]))
    COSTS_FILE.write_text(json.dumps(costs, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(costs)} tests' times to {COSTS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
