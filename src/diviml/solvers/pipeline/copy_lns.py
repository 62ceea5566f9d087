"""Pipelines of a repeated layer: a few copies at a time placed again by CP-SAT, the rest held (an LNS).

The patterns' integer mix (:mod:`.pattern_mix`) places every copy by one of the patterns it generated: its
whole numbers leave the load of the slowest devices above what a mix of fractions reaches (GPT-3 over
six-servers: the A100s at 1.674 s where the LP mixes 1.642 s, host CPUs idle at 1.28-1.56 s, their pieces too
coarse for the patterns at hand). Here a few copies (:data:`FREED`) are freed at a time, each group of each a
device of its own choosing, and CP-SAT places them beside the held ones. The loads are the simulator's
(:func:`diviml.simulate.pipeline_loads`), written linearly for the freed copies' tasks and every tensor they
make or read: a reader away from its producer's device pays the hop in (and the network from another
server), the producer the hop out (a peer link is priced as a hop; the simulator's loads decide). CP-SAT
minimises the largest load, then the excess over levels below it (:func:`_levels`), so a step that cannot
lower the largest still moves load from the devices near it to less loaded ones, until it falls. A step is
kept where the simulator's loads are lower so (the largest, then the excess).
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping

import numpy as np
from ortools.sat.python import cp_model

from ...problem import Problem
from ...simulate import pipeline_loads, tensor_charges
from ..engines.plans import Stopwatch
from .pattern_mix import Layer

__all__ = ["relieve_copies"]

HOT = 3  # the freed copies have a task on one of this many devices of the largest loads
FREED = 2  # copies placed again per step (:func:`_choose`)
STEP_LIMIT_S = 1.0  # CP-SAT's time per step, at most
TICKS = 1e6  # a microsecond: the model's unit of load
TARGET = 0.995  # of the largest load: the lowest level of excess, where no target is given
LEVELS = 8  # levels of excess (:func:`_levels`)
NEAR = 0.99  # of the largest load: the lowest level at least (GPT-3 over six-servers from three starts in 20 s:
# 1.6748, 1.6699, 1.6748 s; with the levels from the bound up, 1.6801, 1.6709, 1.6748 s; one level, 1.6744,
# 1.6695, 1.6769 s)
CLOSE = 1e-3  # a largest load this near the target ends the search (GPT-3 over a100-ib-2x8: 0.0% above the bound,
# where 17 s of steps found nothing)
STALL = 40  # steps in a row that find nothing: the search ends
MIN_STEP_S = 0.1  # CP-SAT's time per step, at least
SLACK_TICKS = 100  # the largest load may rise by this in the model: its terms are rounded one by one


def relieve_copies(problem: Problem, layer: Layer, placement: Mapping[str, str], watch: Stopwatch,
                   target: float | None = None, seed: int = 0) -> tuple[dict[str, str], int]:
    """``placement`` after steps of the LNS above, and how many steps lowered its loads: until ``watch``
    expires, the largest load comes within :data:`CLOSE` of ``target`` (by default the excess is counted over :data:`TARGET` of the
    largest load) or :data:`STALL` steps in a row find nothing. Never worse (the simulator's loads), within
    every device's memory."""
    rng = random.Random(seed)
    current, loads = dict(placement), _loads(problem, placement)
    taken = idle = 0
    last = 2 * MIN_STEP_S  # the last step's time: one that would not finish in time is not begun
    while watch.left > last and idle < STALL:
        goal = TARGET * loads.max() if target is None else target
        if loads.max() <= goal * (1 + CLOSE):
            break
        began = watch.elapsed
        freed = _choose(problem, layer, current, loads, rng)
        found = _step(problem, layer, current, loads, freed, goal, min(STEP_LIMIT_S, watch.left / 2))
        new_loads = None if found is None else _loads(problem, found)
        last = watch.elapsed - began
        if found is not None and new_loads is not None and _better(new_loads, loads, _levels(loads.max(), goal)):
            current, loads, taken, idle = found, new_loads, taken + 1, 0
        else:
            idle += 1
    return current, taken


def _loads(problem: Problem, placement: Mapping[str, str]) -> np.ndarray:
    loads = pipeline_loads(problem, placement)
    return np.array([loads.forward[d.name] + loads.backward[d.name] for d in problem.platform.devices])


def _levels(peak: float, goal: float) -> list[float]:
    """The :data:`LEVELS` loads, from ``goal`` (at least :data:`NEAR` of ``peak``) up to below ``peak``, over
    which excess is counted: summed over
    the levels, a load's excess grows faster the higher it is, so moving load from a device to one less loaded
    lowers it (over one level alone, a move between two devices above it changes nothing)."""
    low = max(goal, peak * NEAR)
    return [low + (peak - low) * j / LEVELS for j in range(LEVELS)]


def _penalty(loads: np.ndarray, levels: list[float]) -> float:
    return float(sum(np.maximum(loads - level, 0).sum() for level in levels))


def _better(new: np.ndarray, old: np.ndarray, levels: list[float]) -> bool:
    """Whether ``new`` loads are lower: a smaller largest, or the same with a smaller penalty over ``levels``."""
    if new.max() < old.max() - 1e-12:
        return True
    return new.max() <= old.max() + 1e-12 and _penalty(new, levels) < _penalty(old, levels) - 1e-9


def _choose(problem: Problem, layer: Layer, placement: Mapping[str, str], loads: np.ndarray,
            rng: random.Random) -> list[int]:
    """The copies to free: one with a task on one of the :data:`HOT` devices of the largest loads (at random),
    one more with a task on any of them, the others (where :data:`FREED` asks for more) at random. Two copies
    on the slowest devices trade groups between them and any other device: GPT-3 over six-servers in 20 s
    from 1.6801 s, 1.6744 s so (one level of excess), 1.6775 s with the second copy on one of the least loaded
    devices, 1.6790 s with it on one of the five slowest."""
    names = [d.name for d in problem.platform.devices]
    ranked = np.argsort(loads)
    hot = [names[k] for k in ranked[-HOT:]]
    picks: list[int] = []
    for devices in ({rng.choice(hot)}, set(hot)):
        on = [c for c, copy in enumerate(layer.copies) if any(placement[t] in devices for t in copy) and c not in picks]
        if on:
            picks.append(rng.choice(on))
    while len(picks) < min(FREED, len(layer.copies)):
        c = rng.randrange(len(layer.copies))
        if c not in picks:
            picks.append(c)
    return picks


def _step(problem: Problem, layer: Layer, placement: Mapping[str, str], loads: np.ndarray, freed: list[int],
          goal: float, time_limit: float) -> dict[str, str] | None:
    """The freed copies placed again by CP-SAT (module doc), or None where it found nothing in time."""
    graph, platform = problem.graph, problem.platform
    devices = platform.devices
    index = {d.name: k for k, d in enumerate(devices)}
    free_tasks = {t: (c, layer.group[p]) for c in freed for p, t in enumerate(layer.copies[c])}
    producers = set(free_tasks) | {u for t in free_tasks for u in graph.predecessors[t]}
    base = loads - _charges(problem, placement, producers, free_tasks)
    memory = np.zeros(len(devices))
    for t, name in placement.items():
        if t not in free_tasks:
            memory[index[name]] += graph.by_id[t].memory_bytes
    model = cp_model.CpModel()
    choice, load_terms, memory_terms = _choices(model, layer, freed, devices, memory)
    for u in producers:
        _charge_terms(problem, model, u, placement, free_tasks, choice, load_terms)
    for k, d in enumerate(devices):
        if memory_terms[k] and math.isfinite(d.memory_bytes):
            model.add(sum(memory_terms[k]) <= int(d.memory_bytes - memory[k]))
    peak = _ticks(loads.max()) + SLACK_TICKS  # the terms' rounding aside
    levels = [_ticks(level) for level in _levels(loads.max(), goal)]
    excess = []
    top = model.new_int_var(0, peak, "top")
    for k in range(len(devices)):
        total = sum(load_terms[k]) + _ticks(max(base[k], 0.0))
        model.add(total <= top)
        for j, level in enumerate(levels):
            e = model.new_int_var(0, peak, f"excess_{k}_{j}")
            model.add(e >= total - level)
            excess.append(e)
    model.minimize(len(devices) * top + sum(excess))
    _hint(model, layer, freed, choice, [index[placement[t]] for c in freed for t in layer.copies[c]])
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit, MIN_STEP_S)
    solver.parameters.num_workers = max(os.cpu_count() or 1, 1)
    if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    out = dict(placement)
    for t, (c, g) in free_tasks.items():
        out[t] = devices[next(k for k, x in enumerate(choice[c, g]) if not isinstance(x, int) and solver.value(x))].name
    return out


def _choices(model: cp_model.CpModel, layer: Layer, freed: list[int], devices, held: np.ndarray):
    """Per freed copy and group, a row of literals over the devices (0 where the group cannot run or does not
    fit beside ``held`` bytes), exactly one true; each device's load (in ticks) and memory terms."""
    choice: dict[tuple[int, int], list] = {}
    load_terms: list[list] = [[] for _ in devices]
    memory_terms: list[list] = [[] for _ in devices]
    for c in freed:
        for g in range(len(layer.memory)):
            row: list = []
            for k, device in enumerate(devices):
                seconds = layer.times[g][k]
                if seconds is None or layer.memory[g] + held[k] > device.memory_bytes:
                    row.append(0)
                    continue
                x = model.new_bool_var(f"x_{c}_{g}_{k}")
                row.append(x)
                load_terms[k].append(x * _ticks(seconds))
                if layer.memory[g]:
                    memory_terms[k].append(x * int(math.ceil(layer.memory[g])))
            model.add_exactly_one([x for x in row if not isinstance(x, int)])
            choice[c, g] = row
    return choice, load_terms, memory_terms


def _hint(model: cp_model.CpModel, layer: Layer, freed: list[int], choice: dict, held: list[int]) -> None:
    """The held placement (``held``: the device of each freed copy's tasks in turn) as the hint, a group at the
    device of its first task."""
    hinted: set[tuple[int, int]] = set()
    devices = iter(held)
    for c in freed:
        for p in range(len(layer.copies[c])):
            k_held = next(devices)
            if (c, layer.group[p]) in hinted:
                continue
            hinted.add((c, layer.group[p]))
            for k, x in enumerate(choice[c, layer.group[p]]):
                if not isinstance(x, int):
                    model.add_hint(x, k_held == k)


def _ticks(seconds: float) -> int:
    return int(round(seconds * TICKS))


def _charges(problem: Problem, placement: Mapping[str, str], producers: set[str], tasks: Mapping) -> np.ndarray:
    """Per device, the compute of ``tasks`` and what the tensors of ``producers`` cost (the simulator's rule)."""
    graph, platform = problem.graph, problem.platform
    index = {d.name: k for k, d in enumerate(platform.devices)}
    out = np.zeros(len(index))
    for t in tasks:
        out[index[placement[t]]] += problem.time(t, placement[t])
    for u in producers:
        readers = {placement[v] for v in graph.successors[u]}
        for device, cost in tensor_charges(platform, graph.by_id[u], placement[u], readers):
            out[index[device]] += cost
    return out


def _charge_terms(problem: Problem, model: cp_model.CpModel, u: str, placement: Mapping[str, str],
                  free_tasks: Mapping, choice: dict, load_terms: list[list]) -> None:
    """The load terms of producer ``u``'s tensor, its device and its readers' each a one-hot row of literals
    (a freed task's) or of constants (a held one's): the hop in on a reader's device away from ``u``'s, the
    network there from another server, the hop out on ``u``'s device where a reader is away."""
    graph, platform = problem.graph, problem.platform
    devices = platform.devices
    task = graph.by_id[u]

    def row(t: str) -> list:
        if t in free_tasks:
            return choice[free_tasks[t]]
        return [int(d.name == placement[t]) for d in devices]
    home = row(u)
    readers = [row(v) for v in graph.successors[u]]
    if not readers:
        return
    network = platform.network.time(task.output_bytes) if platform.network else 0.0
    for k, d in enumerate(devices):
        hop = _ticks(platform.hop_time(task, d))
        near = [e for e, other in enumerate(devices) if other.server == d.server]
        _indicator(model, [(r[k], home[k]) for r in readers], hop, load_terms[k], f"in_{u}_{k}")
        _indicator(model, [(r[k], sum(home[e] for e in near)) for r in readers], _ticks(network), load_terms[k],
                   f"net_{u}_{k}")
        _indicator(model, [(home[k], r[k]) for r in readers], hop, load_terms[k], f"out_{u}_{k}")


def _indicator(model: cp_model.CpModel, pairs: list[tuple], cost: int, terms: list, name: str) -> None:
    """Add ``cost`` times a literal at least ``a - b`` for every pair to ``terms``: a constant where all are."""
    if cost <= 0:
        return
    live, seen = [], set()
    for a, b in pairs:  # a pair that cannot force the literal (a is 0, b is 1, or b is a) is left out
        if (isinstance(a, int) and a == 0) or (isinstance(b, int) and b >= 1) or a is b or (id(a), id(b)) in seen:
            continue
        seen.add((id(a), id(b)))
        live.append((a, b))
    if not live:
        return
    if all(isinstance(a, int) and isinstance(b, int) for a, b in live):
        terms.append(cost * max(0, max(a - b for a, b in live)))
        return
    y = model.new_bool_var(name)
    for a, b in live:
        model.add(y >= a - b)
    terms.append(y * cost)
