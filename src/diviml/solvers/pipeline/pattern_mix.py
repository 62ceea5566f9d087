"""The optimisation behind :mod:`.patterns`: which patterns place the copies of a repeated layer, and how many
copies each.

A column generation: a master LP (:func:`_master_lp`) mixes the patterns found so far within every device's
memory at the least largest load; its prices per device (load) and per byte (memory) make a pricing MILP
(:func:`_price`) find the pattern of least priced load for one copy; every pattern found also enters with
:data:`IMAGES` random images under the platform's symmetries (identical servers, identical devices). Then
CP-SAT picks whole numbers of copies (:func:`integer_mix`): on GPT-3's thousand patterns over six-servers
HiGHS's branch and bound stalled at 1.758 s where CP-SAT proved the optimum, 1.674 s, in 10 s.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix

from ...native import native_output_discarded
from ...problem import Problem
from ..engines.plans import Stopwatch

__all__ = ["Column", "Layer", "generate", "integer_mix"]

IMAGES = 30  # random images of each pattern under the platform's symmetries
GENERATE_SHARE = 0.3  # of the time: the column generation; the integer master has most of the rest
PRICE_LIMIT_S = 2.0  # per pricing MILP
MEMORY_MARGIN = 0.999  # of each device's memory the master may fill, the tasks outside the layers aside (at 0.985, GPT-3
# over six-servers, where the V100s and H100s are full of weights: 1.674-1.680 s after the LNS, at 0.999 1.659-1.667 s)
TICKS = 1e6  # CP-SAT's unit of load: a microsecond
MEGABYTE = 1e6  # and of memory


@dataclass(frozen=True)
class Layer:
    """The repeated layer: its copies (task ids by position), each position's group (a task of no time and
    no memory joins its producer's), each group's time per device (None: not allowed) and memory, and the
    producers whose tensors leave their group: (position, consumer groups in the copy, in the next copy)."""
    copies: tuple[tuple[str, ...], ...]
    group: tuple[int, ...]
    times: tuple[tuple[float | None, ...], ...]
    memory: tuple[float, ...]
    producers: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...]


class _Prices:
    """The platform as the patterns price it: devices, hop and network times per position of the layer."""

    def __init__(self, problem: Problem, layer: Layer):
        platform = problem.platform
        self.devices = [d.name for d in platform.devices]
        self.server = [d.server for d in platform.devices]
        first = [problem.graph.by_id[t] for t in layer.copies[0]]
        self.hop = [[platform.hop_time(task, d) for d in platform.devices] for task in first]
        self.network = [platform.network.time(task.output_bytes) if platform.network else 0.0 for task in first]
        self.peer_links = platform.peer_links
        self.bytes = [task.output_bytes for task in first]
        self.capacity = np.array([d.memory_bytes for d in platform.devices])

    def charge(self, position: int, home: int, readers: set[int], load: np.ndarray) -> None:
        """Add to ``load`` what the tensor at ``position``, made on device ``home`` and read on ``readers``,
        costs each device (the rule of :func:`diviml.simulate.pipeline_loads`)."""
        staged = False
        for c in sorted(readers - {home}):
            peer = self.peer_links.get(frozenset((self.devices[home], self.devices[c])))
            if peer is not None:
                cost = peer.time(self.bytes[position])
                load[home] += cost
                load[c] += cost
                continue
            staged = True
            load[c] += self.hop[position][c] + (self.network[position] if self.server[c] != self.server[home] else 0.0)
        if staged:
            load[home] += self.hop[position][home]


def _pattern_load(layer: Layer, prices: _Prices, pattern: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per device, the load and memory of one copy placed by ``pattern`` (a device per group), the next copy
    placed alike."""
    load, memory = np.zeros(len(prices.devices)), np.zeros(len(prices.devices))
    for g, d in enumerate(pattern):
        load[d] += layer.times[g][d]
        memory[d] += layer.memory[g]
    for position, inside, onward in layer.producers:
        home = pattern[layer.group[position]]
        prices.charge(position, home, {pattern[g] for g in inside + onward}, load)
    return load, memory


def _price(layer: Layer, prices: _Prices, load_price: np.ndarray, memory_price: np.ndarray,
           time_limit: float) -> tuple[int, ...] | None:
    """The pattern of least priced load, by a MILP: y[g,d] group g on device d; for each tensor leaving its
    group and each device of positive price, o/i[p,d] its hop out of / into d and w[p,d] the network into d
    (a tensor between devices of one server through a peer link is priced as a hop: the master prices it
    exactly). None where HiGHS found no pattern in time."""
    n_groups, n_devices = len(layer.memory), len(prices.devices)
    col: dict[tuple, int] = {}
    cost: list[float] = []

    def var(key: tuple, c: float) -> int:
        col[key] = len(cost)
        cost.append(c)
        return col[key]

    for g in range(n_groups):
        for d in range(n_devices):
            if layer.times[g][d] is not None and layer.memory[g] <= prices.capacity[d]:
                var(("y", g, d), load_price[d] * layer.times[g][d] + memory_price[d] * layer.memory[g])
    rows: list[tuple[dict[int, float], float, float]] = []
    for g in range(n_groups):
        rows.append(({col["y", g, d]: 1.0 for d in range(n_devices) if ("y", g, d) in col}, 1.0, 1.0))
    for position, inside, onward in layer.producers:
        _crossing_rows(layer, prices, load_price, position, inside + onward, col, var, rows)
    entries = [(r, j, v) for r, (row, _, _) in enumerate(rows) for j, v in row.items()]
    r_, j_, v_ = zip(*entries)
    a = coo_matrix((v_, (r_, j_)), shape=(len(rows), len(cost))).tocsr()
    integral = np.array([1 if key[0] == "y" else 0 for key in col])
    upper = np.where(integral == 1, 1.0, np.inf)
    with native_output_discarded():
        res = milp(np.array(cost), constraints=LinearConstraint(a, [r[1] for r in rows], [r[2] for r in rows]),
                   integrality=integral, bounds=Bounds(0.0, upper),
                   options={"time_limit": max(0.05, time_limit), "mip_rel_gap": 1e-3})
    if res.x is None:
        return None
    return tuple(max((d for d in range(n_devices) if ("y", g, d) in col), key=lambda d: res.x[col["y", g, d]])
                 for g in range(n_groups))


def _difference(slack: int, plus: int | None, minus: int | None) -> dict[int, float]:
    """The row ``slack - plus + minus`` (>= 0: slack >= plus - minus), a column that is None left out."""
    row = {slack: 1.0}
    for j, c in ((plus, -1.0), (minus, 1.0)):
        if j is not None:
            row[j] = row.get(j, 0.0) + c
    return row


def _crossing_rows(layer: Layer, prices: _Prices, load_price: np.ndarray, position: int, readers: tuple[int, ...],
                   col: dict, var, rows: list) -> None:
    """The pricing MILP's rows for the tensor at ``position`` read by the groups ``readers``: o >= y[u,d] -
    y[v,d], i >= y[v,d] - y[u,d], w >= y[v,d] - (u on d's server), per reader v and device d."""
    u = layer.group[position]
    y = col.get
    for d, price in enumerate(load_price):
        if price <= 0:
            continue
        hop = prices.hop[position][d]
        same_server = [e for e, s in enumerate(prices.server) if s == prices.server[d]]
        out = var(("o", position, d), price * hop) if hop > 0 else None
        into = var(("i", position, d), price * hop) if hop > 0 else None
        net = var(("w", position, d), price * prices.network[position]) if prices.network[position] > 0 else None
        for v in readers:
            yu, yv = y(("y", u, d)), y(("y", v, d))
            if out is not None:
                rows.append((_difference(out, yu, yv), 0.0, np.inf))
            if into is not None:
                rows.append((_difference(into, yv, yu), 0.0, np.inf))
            if net is not None:
                row = {net: 1.0}
                if yv is not None:
                    row[yv] = -1.0
                for e in same_server:
                    if ("y", u, e) in col:
                        row[col["y", u, e]] = row.get(col["y", u, e], 0.0) + 1.0
                rows.append((row, 0.0, np.inf))


@dataclass(frozen=True)
class Column:
    """A pattern and its copy's load and memory per device."""
    pattern: tuple[int, ...]
    load: np.ndarray
    memory: np.ndarray


def generate(problem: Problem, layer: Layer, extra_load: np.ndarray, extra_memory: np.ndarray,
              watch: Stopwatch) -> list[Column]:
    """The patterns of the column generation (module doc) and their images, in :data:`GENERATE_SHARE` of the
    time: first every layer on one device, then the pricing MILP's, until none prices below the master's."""
    prices = _Prices(problem, layer)
    n_devices = len(prices.devices)
    columns: list[Column] = []
    seen: set[tuple[int, ...]] = set()

    def add(pattern: tuple[int, ...]) -> bool:
        if pattern in seen:
            return False
        seen.add(pattern)
        columns.append(Column(pattern, *_pattern_load(layer, prices, pattern)))
        return True

    for d in range(n_devices):
        if all(t[d] is not None for t in layer.times):
            add((d,) * len(layer.memory))
    stop = watch.limit * GENERATE_SHARE
    while watch.elapsed < stop:
        master = _master_lp(columns, len(layer.copies), prices.capacity, extra_load, extra_memory)
        if master is None:
            break
        load_price, memory_price, copy_price, _ = master
        pattern = _price(layer, prices, load_price, memory_price, min(PRICE_LIMIT_S, stop - watch.elapsed))
        if pattern is None:
            break
        column_load, column_memory = _pattern_load(layer, prices, pattern)
        reduced = float(load_price @ column_load + memory_price @ column_memory) - copy_price
        if not add(pattern) or reduced > -1e-9:
            break
    rng = random.Random(0)
    for column in list(columns):
        for _ in range(IMAGES):
            image = _image(problem, rng)
            add(tuple(image[d] for d in column.pattern))
    return columns


def _master_lp(columns: list[Column], copies: int, capacity: np.ndarray, extra_load: np.ndarray,
               extra_memory: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, np.ndarray] | None:
    """The master LP's prices (its duals: per device of its load, per byte of its memory, and of a copy) and
    its mix (copies per column); None where no mix of the columns fits."""
    n, n_devices = len(columns), len(capacity)
    finite = np.isfinite(capacity)
    loads = np.array([c.load for c in columns]).T
    memory = np.array([c.memory for c in columns]).T[finite]
    a_ub = np.vstack([np.hstack([loads, -np.ones((n_devices, 1))]), np.hstack([memory, np.zeros((finite.sum(), 1))])])
    b_ub = np.concatenate([-extra_load, capacity[finite] * MEMORY_MARGIN - extra_memory[finite]])
    cost = np.zeros(n + 1)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=np.hstack([np.ones((1, n)), np.zeros((1, 1))]), b_eq=[copies],
                  bounds=[(0, None)] * (n + 1), method="highs")
    if res.status != 0:
        return None
    memory_price = np.zeros(n_devices)
    memory_price[finite] = -res.ineqlin.marginals[n_devices:]
    return -res.ineqlin.marginals[:n_devices], memory_price, float(res.eqlin.marginals[0]), res.x[:n]


def _image(problem: Problem, rng: random.Random) -> list[int]:
    """A random symmetry of the platform as a map of device indices: identical servers permuted, devices and
    all, then identical devices within each group permuted."""
    platform = problem.platform
    index = {d.name: k for k, d in enumerate(platform.devices)}
    image = list(range(len(index)))
    for servers in platform.identical_servers:
        targets = list(servers)
        rng.shuffle(targets)
        for source, target in zip(servers, targets):
            for a, b in zip(source, target):
                image[index[a]] = index[b]
    swap = list(range(len(index)))
    for group in platform.identical_groups:
        names = list(group)
        rng.shuffle(names)
        for a, b in zip(group, names):
            swap[index[a]] = index[b]
    return [swap[image[k]] for k in range(len(index))]


def integer_mix(problem: Problem, layer: Layer, columns: list[Column], extra_load: np.ndarray,
                 extra_memory: np.ndarray, watch: Stopwatch) -> list[tuple[tuple[int, ...], int]] | None:
    """Whole numbers of copies per pattern within every device's memory, of least largest load, by CP-SAT in
    the time left but a tenth (loads in microseconds, rounded up; memory in megabytes, rounded up; HiGHS's
    branch and bound stalled on GPT-3's thousand patterns where CP-SAT proved its optimum in 10 s):
    (pattern, copies) for the patterns used, or None where none was found."""
    limit = watch.left - 0.1 * watch.limit
    if not columns or limit <= 0:
        return None
    capacity = np.array([d.memory_bytes for d in problem.platform.devices])
    model = cp_model.CpModel()
    copies = [model.new_int_var(0, len(layer.copies), f"copies_{k}") for k in range(len(columns))]
    horizon = int(math.ceil(max(float(np.max(c.load)) for c in columns) * len(layer.copies) * TICKS
                            + float(np.max(extra_load)) * TICKS)) + 1
    peak = model.new_int_var(0, horizon, "peak")
    model.add(sum(copies) == len(layer.copies))
    for d in range(len(capacity)):
        terms = [(v, int(math.ceil(c.load[d] * TICKS))) for v, c in zip(copies, columns) if c.load[d] > 0]
        model.add(sum(n * t for n, t in terms) + int(math.ceil(extra_load[d] * TICKS)) <= peak)
        if math.isfinite(capacity[d]):
            held = [(v, int(math.ceil(c.memory[d] / MEGABYTE))) for v, c in zip(copies, columns) if c.memory[d] > 0]
            room = int((capacity[d] * MEMORY_MARGIN - extra_memory[d]) // MEGABYTE)
            if room < 0:
                return None
            model.add(sum(n * m for n, m in held) <= room)
    model.minimize(peak)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = limit
    solver.parameters.num_workers = max(os.cpu_count() or 1, 1)
    solver.parameters.random_seed = 0
    if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return [(c.pattern, solver.value(v)) for c, v in zip(columns, copies) if solver.value(v) > 0]
