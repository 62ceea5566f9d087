"""Baseline: the uniform pipeline split of Megatron-LM and DeepSpeed: equal numbers of layers per stage, one
stage per accelerator, accelerators taken server by server (layers: :mod:`..engines.layers`; order: :mod:`.stages`).

Where an equal share does not fit a device's memory, the devices of the least memory are left out, as a
user of those tools would do (the share grows on the rest); where no set of accelerators holds the model,
the host CPUs take stages too, and the same rule runs over every device. The notes say which were left out.
"""

from __future__ import annotations

from ...errors import InfeasibleError
from ...problem import Problem
from ..engines.layers import colocated_layers, layer_memory
from ..engines.plans import Stopwatch
from .stages import by_server, plan_of_stages, stage_devices

NAME = "uniform"


def equal_shares(layers: int, stages: int) -> list[int]:
    """Layers per stage, as equal as whole layers allow, the larger shares last (Megatron gives the first
    stage the embedding).

    >>> equal_shares(10, 4)
    [2, 3, 2, 3]
    """
    return [(i + 1) * layers // stages - i * layers // stages for i in range(stages)]


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0):
    watch = Stopwatch(time_limit)
    layers = colocated_layers(problem)
    memory = layer_memory(problem, layers)
    by_name = problem.platform.by_name
    accelerators, everything = stage_devices(problem), by_server(problem)
    candidates = [accelerators] + ([everything] if everything != accelerators else [])
    notes: list[str] = []
    for devices in candidates:
        while devices:
            devices = devices[:len(layers)]
            shares = equal_shares(len(layers), len(devices))
            held, start, short = [], 0, []
            for d, n in zip(devices, shares):
                held.append(sum(memory[start:start + n]))
                start += n
                if held[-1] > by_name[d].memory_bytes:
                    short.append(d)
            if not short:
                return plan_of_stages(problem, layers, devices, shares, solver=NAME, watch=watch, notes=notes)
            least = min(by_name[d].memory_bytes for d in short)
            dropped = [d for d in devices if by_name[d].memory_bytes <= least]
            notes.append(f"left out {', '.join(dropped)}: {least / 1e9:.3g} GB each, an equal share needs up to "
                         f"{max(held) / 1e9:.3g} GB")
            devices = [d for d in devices if d not in dropped]
    raise InfeasibleError(f"{NAME}: no set of devices holds the model in equal shares of its {len(layers)} layers "
                          f"({sum(memory) / 1e9:.3g} GB): use memory-split or a solver")
