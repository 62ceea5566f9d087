"""The simulator's :func:`~diviml.simulate.schedule` over arrays and compiled, for the parts polish's search.

The polish times hundreds of thousands of changed plans; the simulator, written for clarity over dicts of parts,
times about 150,000 parts a second. Here the same rules run on arrays: tasks by topological position, each task's
parts (device, samples) in sample order, each device running its parts in the order of a key per part (ties by
task, then part), each part starting once its device is free and the rows it reads from every producer part have
arrived (transfers are ``a + c * rows``: a link's latency plus its bytes, as :meth:`Platform.transfer_time` prices
them). ``tests/solvers/test_parts_timing.py`` checks it against the simulator; the polish's plan is timed by the
simulator itself in the end.
"""

from __future__ import annotations

import math
import threading

import numpy as np
from numba import njit

from ...problem import Problem
from ..engines.arrays import csr

__all__ = ["PartsTiming", "compile_in_background", "compiled_within"]

_started = threading.Lock()  # held for good by the first call of compile_in_background
_compiled = threading.Event()


def compile_in_background() -> None:
    """Compile the kernels (or load them from numba's cache) in a thread, once per process, so that a solve that
    polishes its plan at its end finds them ready: compiling takes about 4 s on the 2-core machine, once per
    install (loading them after that, 0.3 s), and the engines before the polish leave the GIL to it."""
    if _started.acquire(blocking=False):
        threading.Thread(target=_compile, name="diviml-parts-timing", daemon=True).start()


def compiled_within(seconds: float) -> bool:
    """Whether the kernels are ready within ``seconds`` (compiling them in the background if no one has asked
    yet): a polish that finds them not ready by its deadline leaves its plan as it is rather than overrun."""
    compile_in_background()
    return _compiled.wait(max(seconds, 0.0))


def _compile() -> None:
    """Both kernels run once on two tasks of one part each, with the argument types the polish passes; ready
    even where that fails, so that the polish's own call raises the error rather than wait for it."""
    try:
        count = np.ones(2, dtype=np.int64)
        ptr, idx = np.array([0, 0, 1], dtype=np.int64), np.array([0], dtype=np.int64)
        device, size = np.zeros((2, 1), dtype=np.int64), np.ones((2, 1), dtype=np.int64)
        times, transfers = np.ones((2, 1, 2)), np.zeros((2, 1, 1))
        key = _list_keys(np.array([0, 1, 1], dtype=np.int64), np.array([1], dtype=np.int64), np.ones((2, 1)),
                         transfers, count, device, size)
        _run(ptr, idx, times, transfers, transfers, count, device, size, key, 1, np.zeros((2, 1)), np.zeros((2, 1)))
    finally:
        _compiled.set()


class PartsTiming:
    """A problem's times and transfers as arrays, and :meth:`run` to time parts.

    Parts are ``count[t]`` (parts of task t, t by topological position) and ``device[t, k]``, ``size[t, k]``
    (device index, samples) for ``k < count[t]``; times of a (task, device, size) are read once, where first
    asked for (:meth:`need`), so a large batch does not price sizes no plan uses."""

    def __init__(self, problem: Problem):
        graph, platform = problem.graph, problem.platform
        self.problem = problem
        self.tasks = list(graph.topological_order)
        self.index = {t: i for i, t in enumerate(self.tasks)}
        self.devices = [d.name for d in platform.devices]
        n, n_tasks, n_devices = problem.batch_size, len(self.tasks), len(self.devices)
        self.pred_ptr, self.pred_idx = csr([[self.index[u] for u in graph.predecessors[t]] for t in self.tasks])
        self.succ_ptr, self.succ_idx = csr([[self.index[u] for u in graph.successors[t]] for t in self.tasks])
        self.times = np.full((n_tasks, n_devices, n + 1), np.nan)
        self.fixed = np.zeros((n_tasks, n_devices, n_devices))  # a transfer's latency, and its cost per row
        self.per_row = np.zeros((n_tasks, n_devices, n_devices))
        self.whole = np.zeros((n_tasks, n_devices, n_devices))  # the graph's batch (list scheduling's levels)
        by_size: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for i, t in enumerate(self.tasks):
            task = graph.by_id[t]
            key = (task.output_bytes, task.transfer_time)
            if key not in by_size:  # by route, not by pair (as list search does: six-servers has 650 pairs)
                fixed = np.array(platform.transfer_matrix(task, 0.0))
                one_row = np.array(platform.transfer_matrix(task, 1.0 / graph.batch_size))  # a row of the graph's
                by_size[key] = (fixed, one_row - fixed, np.array(platform.transfer_matrix(task, 1.0)))
            self.fixed[i], self.per_row[i], self.whole[i] = by_size[key]
        allowed = problem.allowed_devices  # a task has times on the devices it may run on only
        self.level_time = np.array([[problem.time(t, d) if d in allowed[t] else math.inf for d in self.devices]
                                    for t in self.tasks])
        self.starts = np.zeros((n_tasks, n))
        self.finish = np.zeros((n_tasks, n))

    def need(self, task: int, device: np.ndarray, size: np.ndarray, count: int) -> None:
        """Read the times of ``task``'s parts where not read yet."""
        for k in range(count):
            d, b = int(device[k]), int(size[k])
            if math.isnan(self.times[task, d, b]):
                self.times[task, d, b] = self.problem.time(self.tasks[task], self.devices[d], b)

    def run(self, count: np.ndarray, device: np.ndarray, size: np.ndarray, key: np.ndarray) -> float:
        """The makespan of the parts with each device running its parts by ``key[t, k]`` (ties by task, then
        part), each part's start and finish left in :attr:`starts` and :attr:`finish`; ``-1`` where that order
        contradicts the graph (a device waits for a part that waits for it)."""
        return _run(self.pred_ptr, self.pred_idx, self.times, self.fixed, self.per_row, count, device, size, key,
                    len(self.devices), self.starts, self.finish)

    def list_keys(self, count: np.ndarray, device: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Keys for :meth:`run` that order each device's parts as :func:`~diviml.simulate.list_order` does: by
        the task's bottom level (its largest part's device, times and transfers of the graph's batch), the
        highest first, ties by topological position."""
        return _list_keys(self.succ_ptr, self.succ_idx, self.level_time, self.whole, count, device, size)


@njit(cache=True, nogil=True)
def _list_keys(succ_ptr, succ_idx, level_time, whole, count, device, size):
    n_tasks = count.shape[0]
    home = np.empty(n_tasks, dtype=np.int64)
    for t in range(n_tasks):
        best = 0
        for k in range(1, count[t]):
            if size[t, k] > size[t, best]:
                best = k
        home[t] = device[t, best]
    level = np.zeros(n_tasks)
    for t in range(n_tasks - 1, -1, -1):
        ready = 0.0
        for e in range(succ_ptr[t], succ_ptr[t + 1]):
            s = succ_idx[e]
            ready = max(ready, level[s] + whole[t, home[t], home[s]])
        level[t] = level_time[t, home[t]] + ready
    rank = np.empty(n_tasks)
    rank[np.argsort(-level, kind="mergesort")] = np.arange(n_tasks)
    key = np.empty(size.shape)
    for t in range(n_tasks):
        key[t, :] = rank[t]
    return key


@njit(cache=True, nogil=True)
def _run(pred_ptr, pred_idx, times, fixed, per_row, count, device, size, key, n_devices, starts, finish):
    n_tasks = count.shape[0]
    offset = np.zeros(size.shape)
    total = 0
    for t in range(n_tasks):
        acc = 0
        for k in range(count[t]):
            offset[t, k] = acc
            acc += size[t, k]
            finish[t, k] = -1.0
        total += count[t]
    # each device's parts by key, ties by task then part: a stable sort of the parts listed in that order
    part_task = np.empty(total, dtype=np.int64)
    part_k = np.empty(total, dtype=np.int64)
    keys = np.empty(total)
    p = 0
    for t in range(n_tasks):
        for k in range(count[t]):
            part_task[p], part_k[p], keys[p] = t, k, key[t, k]
            p += 1
    by_key = np.argsort(keys, kind="mergesort")
    ptr = np.zeros(n_devices + 1, dtype=np.int64)
    for p in range(total):
        ptr[device[part_task[p], part_k[p]] + 1] += 1
    for d in range(n_devices):
        ptr[d + 1] += ptr[d]
    seq = np.empty(total, dtype=np.int64)
    fill = ptr[:-1].copy()
    for p in by_key:
        d = device[part_task[p], part_k[p]]
        seq[fill[d]] = p
        fill[d] += 1
    return _simulate(pred_ptr, pred_idx, times, fixed, per_row, count, device, size, offset, part_task, part_k,
                     ptr, seq, starts, finish)


@njit(cache=True, nogil=True)
def _simulate(pred_ptr, pred_idx, times, fixed, per_row, count, device, size, offset, part_task, part_k, ptr, seq,
              starts, finish):
    """Each device runs the next part of its sequence as soon as it is free and its rows have arrived, round
    after round over the devices, as the simulator does."""
    n_devices = ptr.shape[0] - 1
    head = ptr[:-1].copy()
    free = np.zeros(n_devices)
    remaining = seq.shape[0]
    makespan = 0.0
    while remaining > 0:
        progressed = False
        for d in range(n_devices):
            while head[d] < ptr[d + 1]:
                p = seq[head[d]]
                t, k = part_task[p], part_k[p]
                lo, hi = offset[t, k], offset[t, k] + size[t, k]
                ready, blocked = 0.0, False
                for e in range(pred_ptr[t], pred_ptr[t + 1]):
                    u = pred_idx[e]
                    for j in range(count[u]):
                        rows = min(hi, offset[u, j] + size[u, j]) - max(lo, offset[u, j])
                        if rows <= 0:
                            continue
                        if finish[u, j] < 0.0:
                            blocked = True
                            break
                        src = device[u, j]
                        arrive = finish[u, j]
                        if src != d:
                            arrive += fixed[u, src, d] + per_row[u, src, d] * rows
                        ready = max(ready, arrive)
                    if blocked:
                        break
                if blocked:
                    break
                start = max(free[d], ready)
                end = start + times[t, d, size[t, k]]
                starts[t, k], finish[t, k] = start, end
                free[d] = end
                makespan = max(makespan, end)
                head[d] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            return -1.0
    return makespan
