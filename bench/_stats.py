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
    """CPU seconds of ``pid`` and its live descendants, with the children they reaped
    (``/proc/<pid>/stat``: utime, stime, cutime, cstime)."""
    found: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            data = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        rest = data[data.rindex(")") + 2 :].split()
        found[int(entry.name)] = (int(rest[1]), sum(int(x) for x in rest[11:15]))
    children: dict[int, list[int]] = {}
    for child, (parent, _) in found.items():
        children.setdefault(parent, []).append(child)
    ticks, stack = 0, [pid]
    while stack:
        p = stack.pop()
        ticks += found.get(p, (0, 0))[1]
        stack.extend(children.get(p, ()))
    return ticks / _TICK


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
