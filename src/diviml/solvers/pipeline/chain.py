"""Pipelines of consecutive tasks: a topological order cut into runs, one run per device, the order of the
devices searched over the servers.

Where the layer split (:mod:`.layers`) moves whole layers, this cuts between any two tasks, so a device takes
as much of a layer as its time and memory allow (GPT-3's FP32 layers are 7.3 GB: a 16 GB V100 holds two,
and whole layers leave the rest idle). For a target load T, each device in turn takes the longest run from
where the last one stopped whose load stays within T and whose tasks fit in its memory; a dynamic program
over the sets of servers finds the order of the servers that gets furthest (inside a server, its devices
in every order that tells its kinds of device apart), and a bisection finds the least T that gets
through the whole graph. A run's load is its compute, its inputs' hops in (and the network, where the run
before it is on another server) and its outputs' hops out, counted for every tensor that crosses its cuts
(more than the simulator counts for a tensor that skips a run: the plan is then evaluated exactly).
Contiguous by construction, so it also serves ``--contiguous``.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from itertools import accumulate, permutations

import numpy as np

from ...plan import Plan
from ...platform import Device
from ...problem import Problem
from ..engines.plans import Stopwatch, make_plan

__all__ = ["split_chain"]

NAME = "chain DP"
MAX_SERVER_SETS = 10  # servers: up to this many, every order of them (a program over their 2^S sets)
MAX_SEQUENCES = 120  # orders of one server's devices that tell its kinds apart: beyond, its kinds in every order
PRECISION = 1e-4  # the bisection stops when T is known to this relative width


def split_chain(problem: Problem, watch: Stopwatch, *, solver: str = NAME) -> Plan | None:
    """The chain of least largest load found in the time of ``watch``, or None where the objective is not an
    inference pipeline (a training graph's order runs the forward pass, then the backward one: a run would
    hold a layer's forward without its backward), tasks are tied by co-location groups (a cut could part
    them) or no order of the devices holds the tasks in their memory."""
    if problem.objective.kind != "pipeline" or problem.colocation_groups or problem.is_training:
        return None
    chain = _Chain(problem)
    high = chain.serial_load()
    runs = chain.runs(high)
    if runs is None:
        return None
    low = 0.0
    while high - low > PRECISION * high and not watch.expired:
        middle = (low + high) / 2
        found = chain.runs(middle)
        if found is None:
            low = middle
        else:
            high, runs = middle, found
    order = chain.order
    placement = {order[k]: device for device, (i, j) in runs.items() for k in range(i, j)}
    return make_plan(problem, placement=placement, solver=solver, status="feasible", watch=watch,
                     notes=[f"{len(order)} tasks in consecutive runs over {len(runs)} devices, in order "
                            + ", ".join(runs)])


class _Chain:
    """A topological order's prefix sums per device: compute (of the tasks it may run; a run stops before one
    it may not),
    memory, and per cut the hops in and out of the tensors that cross it, and their network time."""

    def __init__(self, problem: Problem):
        graph, platform = problem.graph, problem.platform
        self.order = list(graph.topological_order)
        self.n = n = len(self.order)
        position = {t: k for k, t in enumerate(self.order)}
        self.memory = list(accumulate((graph.by_id[t].memory_bytes for t in self.order), initial=0.0))
        crossing = []  # (producer, first cut it crosses, last cut it crosses)
        for t in self.order:
            last = max((position[v] for v in graph.successors[t]), default=-1)
            if last > position[t]:
                crossing.append((graph.by_id[t], position[t] + 1, last))
        network = platform.network
        spans = [(a, b, network.time(t.output_bytes) if network else 0.0) for t, a, b in crossing]
        self.network = _over_cuts(n, spans)
        self.spans = np.array(spans, dtype=float).reshape(-1, 3)  # per crossing tensor: first, last cut, network
        self._from_entry: dict[int, tuple[list[float], list[float]]] = {}
        self.compute: dict[tuple, list[float]] = {}  # prefix sums of the times of the tasks it may run
        self.barred: dict[tuple, list[int]] = {}  # per position, the first task at or after it it may not run
        self.hops: dict[tuple, list[float]] = {}
        self.capacity: dict[tuple, float] = {}
        self.profile: dict[str, tuple] = {}  # devices of one profile are interchangeable here
        for d in platform.devices:
            barred = tuple(t for t in self.order if d.name not in problem.allowed_devices[t])
            key = (d.type, d.link, d.handoff, d.is_host, d.memory_bytes, barred)
            self.profile[d.name] = key
            if key not in self.compute:
                allowed = [d.name in problem.allowed_devices[t] for t in self.order]
                self.compute[key] = list(accumulate((problem.time(t, d.name) if ok else 0.0
                                                     for t, ok in zip(self.order, allowed)), initial=0.0))
                self.barred[key] = _next_barred(allowed)
                self.hops[key] = _over_cuts(n, [(a, b, platform.hop_time(t, d)) for t, a, b in crossing])
                self.capacity[key] = d.memory_bytes
        self.servers = _server_sequences(platform.devices, self.profile)

    def serial_load(self) -> float:
        """A load every device meets on any run: all the compute and every hop (a start for the bisection)."""
        compute = max(prefix[-1] for prefix in self.compute.values())
        return compute + 2 * max(map(max, self.hops.values())) + max(self.network) + 1.0

    def network_in(self, entry: int | None, i: int) -> float:
        """The network time into a run starting at cut i of the tensors from another server: those crossing
        ``entry``, the cut where the chain entered this server (None: it started here)."""
        if entry is None or i == 0:
            return 0.0
        if entry == i:
            return self.network[i]
        if entry not in self._from_entry:
            first, last, value = self.spans.T
            inside = (first <= entry) & (last >= entry)
            by_end = np.argsort(last[inside])
            ends, values = last[inside][by_end], value[inside][by_end]
            self._from_entry[entry] = (ends.tolist(), np.cumsum(values[::-1])[::-1].tolist())
        ends_at, suffix = self._from_entry[entry]
        k = bisect_left(ends_at, i)
        return suffix[k] if k < len(ends_at) else 0.0

    def load(self, key, i: int, j: int, entry: int | None) -> float:
        """Device profile ``key`` running tasks i..j-1: compute, hops in at cut i (and the network from
        another server, entered at cut ``entry``), hops out at j."""
        total = self.compute[key][j] - self.compute[key][i]
        if i > 0:
            total += self.hops[key][i] + self.network_in(entry, i)
        if j < self.n:
            total += self.hops[key][j]
        return total

    def reach(self, key, i: int, target: float, entry: int | None) -> int:
        """The furthest j such that tasks i..j-1 fit on a device of profile ``key`` within ``target``."""
        memo = self._reached
        if (key, i, entry) not in memo:
            memo[key, i, entry] = self._reach(key, i, target, entry)
        return memo[key, i, entry]

    def _reach(self, key, i: int, target: float, entry: int | None) -> int:
        prefix = self.compute[key]
        fixed = (self.hops[key][i] + self.network_in(entry, i)) if i > 0 else 0.0
        j = min(bisect_right(prefix, prefix[i] + target - fixed) - 1, self.barred[key][i],
                bisect_right(self.memory, self.memory[i] + self.capacity[key] * (1 + 1e-9)) - 1)
        while j > i and self.load(key, i, j, entry) > target:
            j -= 1
        return max(j, i)

    def runs(self, target: float) -> dict[str, tuple[int, int]] | None:
        """Device -> (first task, one past its last) covering the order within ``target``, or None: the
        furthest reach per set of servers used, each server's devices in the best of their sequences."""
        self._reached: dict = {}  # reach per (profile, start, entry) at this target
        names = list(self.servers)
        every = len(names) <= MAX_SERVER_SETS
        reached: dict[int, tuple[int, dict[str, tuple[int, int]]]] = {0: (0, {})}
        for mask in range(1 << len(names)) if every else [(1 << k) - 1 for k in range(len(names))]:
            if mask not in reached:
                continue
            start, taken = reached[mask]
            if start == self.n:
                return taken
            for s, name in enumerate(names):
                if mask >> s & 1 or not (every or mask == (1 << s) - 1):
                    continue
                for sequence in self.servers[name]:
                    end, runs = self._fill(sequence, start, target, entry=start if mask else None)
                    if end > reached.get(mask | 1 << s, (-1,))[0]:
                        reached[mask | 1 << s] = (end, {**taken, **runs})
        end, taken = reached.get((1 << len(names)) - 1, (0, {}))
        return taken if end == self.n else None

    def _fill(self, sequence: list[str], start: int, target: float, entry: int | None):
        """One server's devices in ``sequence``, each taking the longest run it can from ``start``; tensors
        that cross ``entry``, where the chain came from another server (None: it starts here), pay the
        network into the device that reads them."""
        runs = {}
        for device in sequence:
            end = self.reach(self.profile[device], start, target, entry)
            if end > start:
                runs[device] = (start, end)
                start = end
            if start == self.n:
                break
        return start, runs


def _next_barred(allowed: list[bool]) -> list[int]:
    """Per position 0..n, the first task at or after it that is not allowed (n where none is): a run from
    position i may end there at the latest."""
    barred = [len(allowed)] * (len(allowed) + 1)
    for k in range(len(allowed) - 1, -1, -1):
        barred[k] = k if not allowed[k] else barred[k + 1]
    return barred


def _over_cuts(n: int, spans: list[tuple[int, int, float]]) -> list[float]:
    """Per cut 0..n: the sum of the values of the spans (first cut, last cut, value) that contain it."""
    change = [0.0] * (n + 2)
    for a, b, value in spans:
        change[a] += value
        change[b + 1] -= value
    return list(accumulate(change[:n + 1]))


def _server_sequences(devices: tuple[Device, ...], profile: dict[str, tuple]) -> dict[str, list[list[str]]]:
    """Per server, the orders its devices are tried in: every order that tells its profiles apart (a slow
    device may do best between two fast ones, which then hold the tasks around what it takes), or, past
    :data:`MAX_SEQUENCES` of them, its profiles in every order, the devices of one profile together."""
    by_server: dict[str, dict[tuple, list[str]]] = {}
    for d in devices:
        by_server.setdefault(d.server, {}).setdefault(profile[d.name], []).append(d.name)
    sequences = {}
    for server, kinds in by_server.items():
        groups = list(kinds.values())
        if math.factorial(sum(map(len, groups))) // math.prod(math.factorial(len(g)) for g in groups) <= MAX_SEQUENCES:
            sequences[server] = list(_interleavings([list(g) for g in groups]))
        else:
            sequences[server] = [[name for group in order for name in group] for order in permutations(groups)]
    return sequences


def _interleavings(groups: list[list[str]]):
    """Every sequence of the groups' names that keeps each group's own order (identical devices stay in one
    order: swapping two of them changes nothing)."""
    if not any(groups):
        yield []
        return
    for k, group in enumerate(groups):
        if group:
            rest = groups[:k] + [group[1:]] + groups[k + 1:]
            for tail in _interleavings(rest):
                yield [group[0], *tail]
