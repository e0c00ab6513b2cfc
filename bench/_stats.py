"""Small statistics shared by the benchmarks."""

from __future__ import annotations

import gc
import timeit
from collections.abc import Callable

__all__ = ["best_per_item", "percentile"]


def best_per_item(fn: Callable[[], object], n: int, repeat: int) -> float:
    """Best seconds per item over ``repeat`` timed passes of ``fn`` (each handles ``n``
    items); GC collected before, disabled while timing (``timeit``)."""
    gc.collect()
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number / n


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]
