"""Latency summaries the benchmarks share."""

from __future__ import annotations

import statistics


def latency_ms(samples: list[float], digits: int = 3) -> dict[str, float]:
    """Count, p50, p99 and max of latencies in seconds, as milliseconds rounded to ``digits``."""
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "n": len(ordered),
        "p50_ms": round(q[49] * 1000, digits),
        "p99_ms": round(q[98] * 1000, digits),
        "max_ms": round(ordered[-1] * 1000, digits),
    }
