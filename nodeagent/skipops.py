"""Optional node operations (KEP-5945, gate ``DRAOptionalNodeOperations``, alpha in 1.37).

A ResourceSlice may say ``skipNodeOperations: [NodePrepareResources, NodeUnprepareResources]``
(or ``["*"]``); the scheduler copies it into each allocation result of its devices
(``status.allocation.devices.results[].skipNodeOperations``). The kubelet 1.37.2 then leaves out a
driver's call for a claim when *every* device of that driver in the claim skips it
(``pkg/kubelet/cm/dra/claiminfo.go`` ``computeDriverStates``): ``*`` on every result skips both;
else an operation is skipped when the results naming it plus those naming ``*`` are all of the
driver's results. It keeps the outcome per driver in its checkpoint (``state.DriverState``), does
not even look up the plugin of a skipped prepare (``manager.go`` ``prepareResources``), and a
kubelet with the gate off refuses such a claim. A node declares the feature in
``status.declaredFeatures`` (``component-helpers`` ``nodedeclaredfeatures``), without which the
scheduler places no pod whose claim skips an operation on it (``dynamicresources.go``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from nodeagent.errors import PrepareError

__all__ = ["ALL", "FEATURE", "PREPARE", "UNPREPARE", "driver_skips", "skips"]

PREPARE = "NodePrepareResources"
UNPREPARE = "NodeUnprepareResources"
ALL = "*"
FEATURE = "DRAOptionalNodeOperations"
"""The feature gate, and the name the node declares in ``status.declaredFeatures``."""


def driver_skips(claim: dict[str, Any], enabled: bool) -> dict[str, list[str]]:
    """Driver -> the node operations skipped for it in this allocated claim (``[*]``, or a sorted
    list of operations); drivers that skip nothing are left out. PrepareError when one would be
    skipped and the gate is off (``enabled``), as the kubelet refuses the claim."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    total: Counter[str] = Counter()
    named: dict[str, Counter[str]] = defaultdict(Counter)
    for result in results:
        driver = str(result.get("driver") or "")
        total[driver] += 1
        ops = list(result.get("skipNodeOperations") or ())
        if ALL in ops:
            named[driver][ALL] += 1  # subsumes every operation of this result
            continue
        for op in dict.fromkeys(ops):
            named[driver][op] += 1
    out: dict[str, list[str]] = {}
    for driver, count in total.items():
        counts = named.get(driver)
        if not counts:
            continue
        if counts[ALL] == count:
            skipped = [ALL]
        else:
            skipped = sorted(op for op, n in counts.items() if op != ALL and n + counts[ALL] == count)
        if skipped and not enabled:
            name = (claim.get("metadata") or {}).get("name", "")
            raise PrepareError(f"ResourceClaim {name}: {FEATURE} feature gate is disabled on kubelet")
        if skipped:
            out[driver] = skipped
    return out


def skips(skipped: Iterable[str], op: str) -> bool:
    """Whether ``op`` is skipped, given a driver's skipped operations (``DriverState.Skips``)."""
    ops = set(skipped)
    return ALL in ops or op in ops
