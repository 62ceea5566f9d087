"""Job graphs: the latency and batch objectives as one scheduling problem over jobs.

A job is one sub-batch ``l`` of one task. Every task is split the same way, into sub-batches of sizes
``sizes[l]`` (consecutive sample ranges), so sub-batch ``l`` of a task needs only sub-batch ``l`` of its
producers: the batch becomes ``len(sizes)`` copies of the graph that share the devices. The latency
objective is the one-copy case. This is the decision space of the HEFT and exact solvers; the simulator
evaluates their answers under the general model.

A job graph may also be a *sub-problem* (what MILP-SPLIT solves module by module): only some tasks, with the
rest already scheduled. Then ``release`` gives the earliest start of a job on a device (its inputs from
outside have arrived and the device has finished its earlier work), ``only`` pins jobs to some devices and
``capacity`` is the memory each device has left.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping

from ...problem import Problem

JobKey = tuple[str, int]  # (task id, sub-batch index)


@dataclass(frozen=True)
class JobGraph:
    problem: Problem
    sizes: tuple[int, ...]
    tasks: tuple[str, ...] | None = None  # the sub-problem's tasks in topological order (None: all)
    release: Mapping[tuple[JobKey, str], float] = field(default_factory=dict)  # (job, device) -> earliest start
    only: Mapping[JobKey, tuple[str, ...]] = field(default_factory=dict)  # job -> the devices it is pinned to
    capacity: Mapping[str, float] | None = None  # device -> memory left (None: the devices' memory)

    @staticmethod
    def whole(problem: Problem) -> "JobGraph":
        return JobGraph(problem, (problem.batch_size,))

    @cached_property
    def jobs(self) -> tuple[JobKey, ...]:
        """In topological order of tasks, sub-batches inner."""
        return tuple((t, l) for t in self.task_ids for l in range(len(self.sizes)))

    @cached_property
    def task_ids(self) -> tuple[str, ...]:
        return self.problem.graph.topological_order if self.tasks is None else tuple(self.tasks)

    @cached_property
    def _members(self) -> frozenset[str] | None:
        return None if self.tasks is None else frozenset(self.tasks)

    def has(self, task: str) -> bool:
        """Whether ``task`` belongs to this (sub-)problem."""
        return self._members is None or task in self._members

    def preds(self, job: JobKey) -> tuple[JobKey, ...]:
        """Producers of ``job`` inside this (sub-)problem; outside ones are folded into ``release``."""
        t, l = job
        return tuple((u, l) for u in self.problem.graph.predecessors[t] if self.has(u))

    def succs(self, job: JobKey) -> tuple[JobKey, ...]:
        t, l = job
        return tuple((v, l) for v in self.problem.graph.successors[t] if self.has(v))

    def devices(self, job: JobKey) -> tuple[str, ...]:
        allowed = self.problem.allowed_devices[job[0]]
        if job in self.only:
            return tuple(d for d in allowed if d in self.only[job])
        return allowed

    def released(self, job: JobKey, device: str) -> float:
        """The earliest start of ``job`` on ``device`` (0 in a whole problem)."""
        return self.release.get((job, device), 0.0)

    def duration(self, job: JobKey, device: str) -> float:
        return self.problem.time(job[0], device, self.sizes[job[1]])

    def transfer(self, job: JobKey, src: str, dst: str) -> float:
        return self.problem.transfer(job[0], src, dst, self.sizes[job[1]] / self.problem.graph.batch_size)

    def memory_limits(self) -> list[tuple[str, float, list[tuple[str, float]]]]:
        """(device, capacity, [(task, bytes)]) for devices whose memory could bind: the tasks with resident
        memory that may run there. A task's jobs share its memory on a device."""
        problem = self.problem
        tasks = [problem.graph.by_id[t] for t in self.task_ids]
        total = sum(t.memory_bytes for t in tasks)
        out = []
        for dev in problem.platform.devices:
            capacity = dev.memory_bytes if self.capacity is None else self.capacity[dev.name]
            if capacity < total:
                out.append((dev.name, capacity, [(t.id, t.memory_bytes) for t in tasks
                                                 if t.memory_bytes > 0 and dev.name in problem.allowed_devices[t.id]]))
        return out

    def colocated(self) -> list[tuple[JobKey, JobKey, tuple[str, ...]]]:
        """(job, job, devices either may use) pairs that a co-location group puts on one device."""
        problem = self.problem
        out = []
        for members in problem.colocation_groups.values():
            members = [m for m in members if self.has(m)]
            if len(members) < 2:
                continue
            first = members[0]
            for other in members[1:]:
                devices = tuple(sorted(set(problem.allowed_devices[first]) | set(problem.allowed_devices[other])))
                out.extend(((first, l), (other, l), devices) for l in range(len(self.sizes)))
        return out

    def parts(self, device_of: dict[JobKey, str]) -> dict[str, list[tuple[str, int]]]:
        """The simulator's parts (task -> [(device, samples)] in sample order)."""
        return {t: [(device_of[(t, l)], b) for l, b in enumerate(self.sizes)] for t in self.task_ids}

    def retime(self, device_of: Mapping[JobKey, str], order_key: Mapping[JobKey, float]) -> tuple[dict, dict]:
        """Start and finish of every job on its device in ``device_of``, each device running its jobs in the
        order of ``order_key`` (:meth:`by_key`) as early as possible: after the job's release
        there, the device's previous job and its producers' outputs (sent where they must be). Of two jobs of
        one key, one that takes no time on its device runs first, as in :meth:`order` (it ran at that time, not
        after the other: GPT-3's prefill plan over six-servers re-timed at 26.07 s from its own start times
        with its views behind each layer's projection, against the simulator's 24.98 s)."""
        start: dict = {}
        finish: dict = {}
        free: dict = {}
        for j in self.by_key({j: (order_key[j], self.duration(j, device_of[j]) > 0) for j in self.jobs}):
            d = device_of[j]
            s = max([self.released(j, d), free.get(d, 0.0)]
                    + [finish[u] + self.transfer(u, device_of[u], d) for u in self.preds(j)])
            start[j], finish[j] = s, s + self.duration(j, d)
            free[d] = finish[j]
        return start, finish

    def order(self, device_of: dict[JobKey, str], start: dict[JobKey, float]) -> dict[str, list[tuple[str, int]]]:
        """Device -> [(task, part index)] by start time, then end time (a job that takes no time starts and ends
        before one that takes time and starts with it, as the solver's schedule has it), then topological
        position."""
        order: dict[str, list[tuple[str, int]]] = {d.name: [] for d in self.problem.platform.devices}
        key = {j: (start[j], start[j] + self.duration(j, device_of[j])) for j in self.jobs}
        for j in self.by_key(key):
            order[device_of[j]].append(j)
        return order

    def by_key(self, key: Mapping[JobKey, Any]) -> list[JobKey]:
        """Every job, by ``key`` (ties: topological position), but never before its producers: a solver's
        start times may put a job a rounding error before a producer that takes no time, and a device
        order taken from them must still run (the simulator would find it deadlocked)."""
        position = {j: i for i, j in enumerate(self.jobs)}
        waiting = {j: len(self.preds(j)) for j in self.jobs}
        ready = [(key[j], position[j], j) for j, n in waiting.items() if n == 0]
        heapq.heapify(ready)
        out = []
        while ready:
            *_, j = heapq.heappop(ready)
            out.append(j)
            for v in self.succs(j):
                waiting[v] -= 1
                if waiting[v] == 0:
                    heapq.heappush(ready, (key[v], position[v], v))
        return out


def batch_splits(problem: Problem) -> list[tuple[int, ...]]:
    """The batch splits the exact and split solvers search: the whole batch for latency; for the batch
    objective, L = 1 .. K near-equal sub-batches (K devices, at most one sample each) and, for L = 2 .. K,
    the shares of the L fastest devices that balance the time each takes to run the whole graph on its share
    (:func:`balanced_shares`). Proportional to speed where time is linear in the batch; where kernels are
    launch-bound a share costs nearly as much as the whole batch, and the faster GPU takes more: mobilenet_v3_large
    at batch 8 on paper-server, 5 on the A100 and 3 on the V100 (speeds at the full batch said 4/4).
    Where a task mixes the samples of its batch, which a job graph cannot keep whole while it cuts the others,
    only the whole batch (the parts polish then cuts the other tasks)."""
    if problem.objective.kind != "batch" or problem.whole_batch:  # a task run on the whole batch: every task here
        return [(problem.batch_size,)]
    n, k = problem.batch_size, len(problem.platform.devices)
    splits = [near_equal_split(n, parts) for parts in range(1, min(k, n) + 1)]
    type_of = {d.name: d.type for d in problem.platform.devices}
    able = [d for d in type_of if all(d in problem.allowed_devices[t.id] for t in problem.graph.tasks)]
    serial: dict[str, Callable[[int], float]] = {}  # device type -> its serial time, shared by devices of a type
    for d in able:
        if type_of[d] not in serial:
            serial[type_of[d]] = serial_time(problem, d)
    fastest = sorted(able, key=lambda d: serial[type_of[d]](n))  # quickest on the whole batch first (ties: in order)
    for parts in range(2, min(len(fastest), n) + 1):
        splits.append(tuple(sorted(balanced_shares([serial[type_of[d]] for d in fastest[:parts]], n), reverse=True)))
    return list(dict.fromkeys(s for s in splits if all(x > 0 for x in s)))


def serial_time(problem: Problem, device: str) -> Callable[[int], float]:
    """``b`` -> the time ``device`` takes to run every task of the graph on ``b`` samples, one after another.

    Evaluated once at the sizes where some task's batch table bends (:meth:`Problem.pricing_sizes`) and
    interpolated between them: every task's time is linear there, so the sum is exact at every size."""
    tasks = problem.graph.topological_order
    points = sorted({b for t in tasks for b in problem.pricing_sizes(t, device)})
    values = [sum(problem.time(t, device, b) for t in tasks) for b in points]

    def at(b: int) -> float:
        i = bisect.bisect_left(points, b)
        if points[i] == b:
            return values[i]
        (a, c), (fa, fc) = points[i - 1:i + 1], values[i - 1:i + 1]
        return fa + (fc - fa) * (b - a) / (c - a)
    return at


def balanced_shares(serial: list[Callable[[int], float]], n: int) -> tuple[int, ...]:
    """``n`` samples over devices whose ``serial`` times for ``b`` samples are given, one sample at least
    each: every further sample goes where its device's time would be least (ties: the earlier device), so
    that the largest is small.

    >>> balanced_shares([lambda b: 10 + b, lambda b: 11 + 2 * b], 8)  # times 16 and 15 (5/3: 15 and 17)
    (6, 2)
    """
    shares = [1] * len(serial)
    heap = [(f(2), i) for i, f in enumerate(serial)]
    heapq.heapify(heap)
    for _ in range(n - len(serial)):
        _, i = heapq.heappop(heap)
        shares[i] += 1
        heapq.heappush(heap, (serial[i](shares[i] + 1), i))
    return tuple(shares)


def near_equal_split(n: int, parts: int) -> tuple[int, ...]:
    """``n`` samples in ``parts`` sub-batches whose sizes differ by at most one (largest first)."""
    q, r = divmod(n, parts)
    return tuple(q + 1 if i < r else q for i in range(parts))


def proportional(n: int, weights: list[float]) -> tuple[int, ...]:
    """``n`` as integer shares proportional to ``weights`` (largest remainders), each weight > 0 getting >= 1
    where ``n`` allows.

    >>> proportional(8, [1.6, 1.0])
    (5, 3)
    """
    total = sum(weights)
    raw = [n * w / total for w in weights]
    shares = [max(1, math.floor(r)) if n >= len(weights) else math.floor(r) for r in raw]
    while sum(shares) > n:
        k = max(range(len(shares)), key=lambda i: (shares[i] - raw[i], shares[i]))
        shares[k] -= 1
    order = sorted(range(len(shares)), key=lambda i: raw[i] - shares[i], reverse=True)
    for k in itertools.islice(itertools.cycle(order), max(0, n - sum(shares))):
        shares[k] += 1
    return tuple(shares)


def speeds(problem: Problem, devices: list[str]) -> list[float]:
    """Samples per second of each device running the whole graph alone at the full batch (0 for a device
    that cannot run some task)."""
    n = problem.batch_size
    out = []
    for d in devices:
        if any(d not in problem.allowed_devices[t.id] for t in problem.graph.tasks):
            out.append(0.0)
        else:
            out.append(n / max(sum(problem.time(t.id, d, n) for t in problem.graph.tasks), 1e-30))
    return out


def earliest_gap(slots: list[tuple[float, float]], ready: float, duration: float) -> float:
    """Earliest start >= ready where [start, start+duration) fits between busy slots.

    A device's slots are disjoint, so their ends are sorted too: no gap before the first slot that ends at
    ``ready`` or later can hold the job, and the search starts there (scanning from the first slot made
    HEFT quadratic in the jobs per device)."""
    first = bisect.bisect_left(slots, ready, key=lambda slot: slot[1])
    prev_end = slots[first - 1][1] if first else 0.0
    for i in range(first, len(slots)):
        s, e = slots[i]
        begin = max(prev_end, ready)
        if begin + duration <= s:
            return begin
        prev_end = e
    return max(prev_end, ready)
