"""Chaos: ``kill -9`` the driver at random moments of prepare and unprepare, and count what breaks.

One driver node as a process (``tests/driver/crashnode.py``: ``DeviceState`` and the plugin on
a fakegpu ``dgx-h100`` kept on disk, two GPUs partitionable), six claims (three MIG partitions,
three GPUs). Each cycle: start the node (the time until it serves again is the *recovery*,
restore included), retry the call the kill cut short as the kubelet would, check the node
(checkpoint, CDI specs, info dirs and MIG instances agree, the specs name only MIG devices that
exist, the prepared claims are those the kubelet was told are prepared), then let a client
prepare and unprepare random batches and ``kill -9`` the node after a random 5-150 ms.

``inconsistencies`` counts the cycles whose check found anything (the aim is 0).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

CYCLES = 100
DEVICES = [
    "gpu-0-part-3g40gb-0",
    "gpu-0-part-3g40gb-4",
    "gpu-1-part-7g80gb-0",
    "gpu-2",
    "gpu-3",
    "gpu-4",
]


def _claims(driver: str, node: str) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {"namespace": "chaos", "name": f"c{i}", "uid": str(uuid.uuid4())},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": "gpu", "driver": driver, "pool": node, "device": device}]
                    }
                }
            },
        }
        for i, device in enumerate(DEVICES)
    ]


class _Client:
    """The kubelet's side: random batches; remembers what it was told and what is in flight."""

    def __init__(self, root: Path, claims: list[dict[str, Any]], rng: random.Random) -> None:
        self.root = root
        self.claims = claims
        self.rng = rng
        self.prepared: set[str] = set()
        self.in_flight: tuple[str, list[dict[str, Any]]] | None = None
        self.errors: list[str] = []

    def call(self, verb: str, batch: list[dict[str, Any]]) -> bool:
        from tests.driver import crashnode

        self.in_flight = (verb, batch)
        response = crashnode.call(self.root, verb, batch, timeout=10)
        if response is None:
            return False  # the node died: the kubelet retries the same call
        for claim in batch:
            uid = claim["metadata"]["uid"]
            error = response.claims[uid].error
            if error:
                self.errors.append(f"{verb} {uid}: {error}")
            elif verb == "prepare":
                self.prepared.add(uid)
            else:
                self.prepared.discard(uid)
        self.in_flight = None
        return True

    def churn(self, stop: threading.Event) -> None:
        while not stop.is_set():
            batch = self.rng.sample(self.claims, self.rng.randint(1, len(self.claims)))
            if not self.call(self.rng.choice(["prepare", "unprepare"]), batch):
                return


def _p(samples: list[float], q: int) -> float:
    if len(samples) < 2:
        return round(samples[0] * 1000, 1) if samples else 0.0
    return round(statistics.quantiles(samples, n=100, method="inclusive")[q - 1] * 1000, 1)


def run(cycles: int = CYCLES, seed: int = 10) -> dict[str, Any]:
    """Kill -9 cycles: inconsistencies found, recovery time, calls cut short."""
    from tests.driver import crashnode

    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="chs"))
    claims = _claims(crashnode.DRIVER, crashnode.NODE)
    (root / "claims.json").write_text(json.dumps(claims))
    client = _Client(root, claims, rng)
    recovery: list[float] = []
    inconsistent: list[dict[str, Any]] = []
    cut_short = 0
    try:
        for cycle in range(cycles):
            started = time.perf_counter()
            proc = crashnode.start(root)
            recovery.append(time.perf_counter() - started)
            if client.in_flight is not None:
                cut_short += 1
                client.call(*client.in_flight)
            report = crashnode.consistency(root)
            problems = list(report["problems"])
            if set(report["prepared"]) != client.prepared:
                problems.append(
                    f"prepared {report['prepared']}, the kubelet was told {sorted(client.prepared)}"
                )
            if problems:
                inconsistent.append({"cycle": cycle, "problems": problems})
            stop = threading.Event()
            churn = threading.Thread(target=client.churn, args=(stop,))
            churn.start()
            time.sleep(rng.uniform(0.005, 0.15))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            stop.set()
            churn.join()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "cycles": cycles,
        "inconsistencies": len(inconsistent),
        "calls_cut_short": cut_short,
        "claim_errors": len(client.errors),
        "recovery_p50_ms": _p(recovery, 50),
        "recovery_p99_ms": _p(recovery, 99),
        "recovery_max_ms": round(max(recovery) * 1000, 1),
        "examples": inconsistent[:3] + [{"claim_error": e} for e in client.errors[:3]],
        "cpus": os.cpu_count(),
    }
