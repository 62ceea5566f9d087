"""Baseline: a pipeline split in proportion to memory: each accelerator, server by server, gets consecutive
layers in proportion to its memory (the split users reach for when devices differ in size; see
:mod:`.stages`); host CPUs join when the accelerators cannot hold the model. Shares that do not fit after
rounding move to the next device with room.
"""

from __future__ import annotations

import math

from ...errors import InfeasibleError
from ...problem import Problem
from ..engines.layers import colocated_layers, layer_memory
from ..engines.plans import Stopwatch
from .stages import fit_shares, plan_of_stages, stage_devices

NAME = "memory-split"


def proportional_shares(total: int, weights: list[float]) -> list[int]:
    """``total`` whole units in proportion to ``weights``, by largest remainder.

    >>> proportional_shares(10, [40.0, 16.0, 80.0])
    [3, 1, 6]
    """
    exact = [total * w / sum(weights) for w in weights]
    shares = [math.floor(x) for x in exact]
    for k in sorted(range(len(weights)), key=lambda k: shares[k] - exact[k])[:total - sum(shares)]:
        shares[k] += 1
    return shares


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0):
    watch = Stopwatch(time_limit)
    layers = colocated_layers(problem)
    memory = layer_memory(problem, layers)
    by_name = problem.platform.by_name
    devices = stage_devices(problem)
    if sum(by_name[d].memory_bytes for d in devices) < sum(memory):
        devices += [d.name for d in problem.platform.devices if d.is_host and d.name not in devices]
    finite = [by_name[d].memory_bytes for d in devices if math.isfinite(by_name[d].memory_bytes)]
    stand_in = max(finite + [sum(memory), 1.0])  # a device without a memory limit weighs as the largest
    capacity = [by_name[d].memory_bytes for d in devices]
    weights = [c if math.isfinite(c) else stand_in for c in capacity]
    shares = fit_shares(memory, capacity, proportional_shares(len(layers), weights))
    if shares is None:
        raise InfeasibleError(f"{NAME}: the devices cannot hold the model's {len(layers)} layers "
                              f"({sum(memory) / 1e9:.3g} GB) in consecutive stages")
    return plan_of_stages(problem, layers, devices, shares, solver=NAME, watch=watch, notes=[])
