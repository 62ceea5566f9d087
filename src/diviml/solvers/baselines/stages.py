"""What the layer-split baselines share: a model's layers, the devices its stages go to, and a plan from stages.

A *layer* is a repeated block of the model, read off the task's module path (``blocks.17.attn`` is layer 17
of ``blocks``; the longest numbered list of modules wins); a task outside every block joins the layer of the
task before it in topological order (the embedding joins the first). A graph without numbered blocks has
one layer per task. *Stages* are runs of consecutive layers, one per device, and the devices are taken in
the platform's order, server by server, as Megatron-LM and DeepSpeed number pipeline ranks.
"""

from __future__ import annotations

import re
from collections import Counter

from ...errors import InfeasibleError
from ...problem import Problem
from ..engines.plans import Stopwatch, make_plan

__all__ = ["layers_of", "stage_devices", "plan_of_stages", "fit_shares"]

_NUMBERED = re.compile(r"^(.*?)\.(\d+)(?:\.|$)")


def layers_of(problem: Problem) -> list[list[str]]:
    """The tasks of each layer, layers in order, tasks in topological order.

    >>> from diviml import Task, TaskGraph, Platform, Problem, Device
    >>> tasks = [Task("embed", {"cpu": 1}), Task("a", {"cpu": 1}, module="blocks.0.attn"),
    ...          Task("b", {"cpu": 1}, module="blocks.1.mlp"), Task("head", {"cpu": 1})]
    >>> graph = TaskGraph.create(tasks, [("embed", "a"), ("a", "b"), ("b", "head")])
    >>> layers_of(Problem(graph, Platform((Device("cpu", "cpu", is_host=True),))))
    [['embed', 'a'], ['b', 'head']]
    """
    graph = problem.graph
    numbered = {t.id: _NUMBERED.match(t.module or "") for t in graph.tasks}
    counts = Counter((m.group(1), m.group(2)) for m in numbered.values() if m)
    lists = Counter(prefix for prefix, _ in counts)
    if not lists:
        return [[t] for t in graph.topological_order]
    blocks = max(lists, key=lambda prefix: (lists[prefix], sum(n for (p, _), n in counts.items() if p == prefix)))
    layers: list[list[str]] = []
    index_of: dict[str, int] = {}
    pending: list[str] = []  # tasks before the first block
    for t in graph.topological_order:
        m = numbered[t]
        key = m.group(2) if m and m.group(1) == blocks else None
        if key is not None and key not in index_of:
            index_of[key] = len(layers)
            layers.append(pending)
            pending = []
        if key is not None:
            layers[index_of[key]].append(t)
        elif layers:
            layers[-1].append(t)
        else:
            pending.append(t)
    if pending:
        layers.append(pending)
    return layers


def stage_devices(problem: Problem) -> list[str]:
    """The devices stages go to: every accelerator that may run the model's tasks, server by server in the
    platform's order; hosts only where the platform has no accelerator."""
    platform = problem.platform
    servers = list(dict.fromkeys(d.server for d in platform.devices))
    ordered = sorted(platform.devices, key=lambda d: servers.index(d.server))
    accelerators = [d.name for d in ordered if not d.is_host]
    return accelerators or [d.name for d in ordered]


def fit_shares(memory: list[float], capacity: list[float], shares: list[int]) -> list[int] | None:
    """``shares`` (layers per device) moved, the fewest layers possible, so that every device holds its
    layers' memory (``memory`` per layer, in order): layers of a device over capacity go to the next device
    with room, or None when they cannot."""
    total = len(memory)
    out, start = [], 0
    for k, cap in enumerate(capacity):
        want = shares[k] if k < len(capacity) - 1 else total - start
        held, n = 0.0, 0
        while n < want and start + n < total and held + memory[start + n] <= cap:
            held += memory[start + n]
            n += 1
        out.append(n)
        start += n
    return out if start == total else None


def plan_of_stages(problem: Problem, layers: list[list[str]], devices: list[str], shares: list[int], *,
                   solver: str, watch: Stopwatch, notes: list[str]):
    """The plan that runs ``shares[k]`` consecutive layers on ``devices[k]`` (a task a device may not run
    goes to the first device of the stage order that may)."""
    placement: dict[str, str] = {}
    start = 0
    for device, n in zip(devices, shares):
        for layer in layers[start:start + n]:
            for t in layer:
                allowed = problem.allowed_devices[t]
                placement[t] = device if device in allowed else next(
                    (d for d in devices if d in allowed), next(iter(allowed)))
        start += n
    if start != len(layers):
        raise InfeasibleError(f"{solver}: the stages hold {start} of {len(layers)} layers")
    used = [f"{d} {n}" for d, n in zip(devices, shares) if n]
    return make_plan(problem, placement=placement, solver=solver, status="feasible", watch=watch,
                     notes=notes + [f"layers per device: {', '.join(used)}"],
                     stats={"layers": float(len(layers)), "stages": float(len(used))})
