"""A task's batch table: its time at any part size, and the few sizes where its least time over a range lies.

A task's ``time_by_batch`` gives its time on a device type at some batch sizes (its ``time`` counts as the
graph's own batch size); between them the time is linear, beyond them proportional.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .graph import Task

__all__ = ["pricing_sizes", "time_at_batch"]


def time_at_batch(task: Task, device_type: str, batch: int, base_batch: int) -> tuple[float, bool]:
    """(time, interpolated?) of ``task`` on ``device_type`` for ``batch`` samples.

    Uses the batch table where it has the size; otherwise interpolates linearly between the two nearest
    sizes (the base time counts as a table entry), or extrapolates proportionally beyond the largest.
    """
    table = dict(task.time_by_batch.get(device_type, {}))
    table.setdefault(base_batch, task.time[device_type])
    if batch in table:
        return table[batch], False
    sizes = sorted(table)
    lower = [s for s in sizes if s < batch]
    upper = [s for s in sizes if s > batch]
    if lower and upper:
        a, b = lower[-1], upper[0]
        return table[a] + (table[b] - table[a]) * (batch - a) / (b - a), True
    if lower:
        a = lower[-1]
        return table[a] * batch / a, True
    b = upper[0]
    return table[b] * batch / b, True


def pricing_sizes(task: Task, device_type: str, base_batch: int, lo: int, hi: int) -> tuple[int, ...]:
    """The part sizes in ``lo..hi`` where the least time of ``task`` on ``device_type``, and its least time per
    sample, over all of ``lo..hi`` are found: the ends and the batch table's sizes between.

    :func:`time_at_batch` is linear between table sizes, so a time's least on a stretch lies at an end of it,
    and so does its time per sample ``(a + k b) / b``, monotone in ``b``; beyond the table it is
    proportional. So a bound prices a handful of sizes, not every size of a batch of thousands.

    >>> from diviml import Task
    >>> t = Task("t", {"gpu": 1.0}, time_by_batch={"gpu": {8: 2.0, 64: 9.0}})
    >>> pricing_sizes(t, "gpu", 1, 1, 4096)
    (1, 8, 64, 4096)
    """
    table = set(task.time_by_batch.get(device_type, {})) | {base_batch}
    return tuple(sorted({lo, hi} | {s for s in table if lo < s < hi}))
