"""Small statistics shared by the benchmarks."""

from __future__ import annotations

import gc
import os
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = [
    "best_per_item",
    "cpu_seconds",
    "fd_count",
    "percentile",
    "rss_bytes",
    "slope",
    "tree_cpu_seconds",
]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, all its threads (Linux
    ``/proc/<pid>/stat``, in clock ticks of 1/``SC_CLK_TCK`` s)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` (with the children it reaped) and of its live descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        p = int(entry)
        parents[p] = int(fields[1])
        times[p] = sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    total = 0.0
    for p, t in times.items():
        q = p
        while q > 1:
            if q == pid:
                total += t
                break
            q = parents.get(q, 0)
    return total


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (``VmRSS`` of ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def fd_count(pid: int) -> int:
    """Open file descriptors of process ``pid`` (entries of ``/proc/<pid>/fd``)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs``; NaN for fewer than two distinct xs."""
    n = len(xs)
    if n < 2:
        return float("nan")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return float("nan")
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
