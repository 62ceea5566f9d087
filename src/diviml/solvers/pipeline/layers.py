"""Pipelines of whole layers: the best split of a model's layers into consecutive runs over an order of devices.

For a model of L repeated layers (:func:`..engines.layers.layers_of`), a dynamic program over (devices in
order, layers placed) gives each device a run of consecutive layers, or none, minimising the largest load
(a run's compute, plus the hops of its input in and its output out; for latency, the sum of the runs' loads)
with every run inside its device's memory: O(D L^2) steps. It is tried over every device order on up to four devices, else over three (the
platform's, fastest first, slowest first: a slow device that must take layers may do best in the middle,
which only the first can give), and each plan is then evaluated by the simulator, transfers and all. The pipeline IP starts from it, and the
latency solvers count it among their baseline plans, where the model has layers (GPT-3: 96).
"""

from __future__ import annotations

import math
from itertools import permutations

from ...plan import Plan
from ...problem import Problem
from ..engines.layers import layer_memory, layers_of, runs_from_choices
from ..engines.plans import Stopwatch, make_plan

__all__ = ["split_layers"]

NAME = "layer DP"
MAX_LAYERS = 2000  # beyond, the O(D L^2) program is not worth its time: the graph has no layers to speak of
EVERY_ORDER_UP_TO = 4  # devices: up to this many, every order is tried (24 programs); above, three


def split_layers(problem: Problem, watch: Stopwatch, *, solver: str = NAME) -> Plan | None:
    """The best of the layer programs over the device orders, or None where the model has no layers (or
    groups of its own, which whole layers could split). For the pipeline objective a run's load is what the
    program keeps small at the largest; for latency, where the runs follow one another, their sum."""
    layers = layers_of(problem)
    graph = problem.graph
    if (not 1 < len(layers) <= MAX_LAYERS or len(layers) == len(graph) or problem.colocation_groups
            or problem.objective.kind not in ("pipeline", "latency")):
        return None
    costs = _LayerCosts(problem, layers)
    speed = {d.name: sum(costs.time[k][d.name] for k in range(len(layers))) for d in problem.platform.devices}
    names = [d.name for d in problem.platform.devices]
    best: Plan | None = None
    orders = (list(permutations(names)) if len(names) <= EVERY_ORDER_UP_TO else
              [names, sorted(names, key=speed.__getitem__), sorted(names, key=speed.__getitem__, reverse=True)])
    for order in orders:
        if watch.expired and best is not None:
            break
        runs = _runs(costs, list(order), total=problem.objective.kind == "latency")
        if runs is None:
            continue
        placement = {t: device for device, (i, j) in runs.items() for layer in layers[i:j] for t in layer}
        plan = make_plan(problem, placement=placement, solver=solver, status="feasible", watch=watch,
                         notes=[f"{len(layers)} layers in consecutive runs: " + ", ".join(
                             f"{d} {j - i}" for d, (i, j) in runs.items())])
        if best is None or plan.objective < best.objective:
            best = plan
    return best


class _LayerCosts:
    """Per layer and device: compute time (inf where a task may not run there), memory, and the hops of the
    layer's outputs that later layers read."""

    def __init__(self, problem: Problem, layers: list[list[str]]):
        graph, platform = problem.graph, problem.platform
        layer_of = {t: k for k, layer in enumerate(layers) for t in layer}
        self.memory = layer_memory(problem, layers)
        self.capacity = {d.name: d.memory_bytes for d in platform.devices}
        self.time: list[dict[str, float]] = []
        self.hop: list[dict[str, float]] = []
        for k, layer in enumerate(layers):
            self.time.append({d.name: sum(problem.time(t, d.name) if d.name in problem.allowed_devices[t] else math.inf
                                          for t in layer) for d in platform.devices})
            leaving = [graph.by_id[t] for t in layer if any(layer_of[v] > k for v in graph.successors[t])]
            self.hop.append({d.name: sum(platform.hop_time(t, d) for t in leaving) for d in platform.devices})
        # per device, of layers 0..k-1: the finite compute, and how many layers may not run there (a sum with
        # their inf would make a later run's difference inf - inf = nan, which passes every comparison)
        self.prefix = {d.name: [0.0] for d in platform.devices}
        self.barred = {d.name: [0] for d in platform.devices}
        for row in self.time:
            for name, times in self.prefix.items():
                finite = math.isfinite(row[name])
                times.append(times[-1] + (row[name] if finite else 0.0))
                self.barred[name].append(self.barred[name][-1] + (not finite))

    def load(self, device: str, i: int, j: int) -> float:
        """A run of layers i..j-1 on ``device``: its compute, its input hop in and its output hop out."""
        if self.barred[device][j] > self.barred[device][i]:
            return math.inf
        total = self.prefix[device][j] - self.prefix[device][i]
        if i > 0:
            total += self.hop[i - 1][device]
        if j < len(self.time):
            total += self.hop[j - 1][device]
        return total


def _runs(costs: _LayerCosts, order: list[str], total: bool = False) -> dict[str, tuple[int, int]] | None:
    """Device -> (first layer, one past the last) minimising the largest run's load over ``order`` (with
    ``total``, the sum of the runs' loads), or None."""
    n = len(costs.time)
    best = [0.0] + [math.inf] * n  # best[i]: the least largest load placing layers 0..i-1 on the devices so far
    choice: list[list[int]] = []
    for device in order:
        now, took = best[:], list(range(n + 1))
        for j in range(1, n + 1):
            held = load = 0.0
            for i in range(j - 1, -1, -1):  # the run i..j-1 on this device, grown leftwards
                held += costs.memory[i]
                if held > costs.capacity[device] * (1 + 1e-9):
                    break
                load = costs.load(device, i, j)
                value = best[i] + load if total else max(best[i], load)
                if value < now[j]:
                    now[j], took[j] = value, i
        best = now
        choice.append(took)
    return runs_from_choices(order, choice) if math.isfinite(best[n]) else None
