"""Times for a device type a graph lacks, derived from a type it has, by the roofline (one written rule).

A platform may name a device type the graph was not profiled for: one the catalogue knows (a T4 beside a
graph profiled for the A100 and V100) or one the platform file describes (``device_types:``, see
:mod:`diviml.platform`). Rather than leave that device idle, each task's time there is derived from its time on
a reference type R the graph has, the same rule that derives the catalogue CPU from the profiling host
(:mod:`diviml.frontends.host`):

    t_D = launch_D + (t_R - launch_R) * W_D / W_R,      W = max(flops / peak, bytes / bandwidth)

with the task's own ``flops`` and ``bytes_accessed`` (the compute-bound ratio of peaks where it has neither),
the same ratio at every batch size of its table, and zero where R runs no kernel (t_R = 0). R is the type of
the same kind (CPU or GPU) whose peak is nearest D's, so measured times carry their overheads over.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..catalogue import DeviceSpec
from ..graph import Task, TaskGraph
from ..platform import Platform

__all__ = ["derive_times", "reference_type", "complete_for"]


def reference_type(graph: TaskGraph, target: DeviceSpec, platform: Platform) -> str | None:
    """The type of ``graph`` to derive ``target`` from: one with a spec, of the same kind, nearest in peak."""
    known = [(t, platform.spec_of(t)) for t in sorted(graph.device_types) if platform.spec_of(t) is not None]
    same_kind = [(t, s) for t, s in known if s.is_cpu == target.is_cpu] or known
    if not same_kind:
        return None
    return min(same_kind, key=lambda ts: abs(math.log(ts[1].peak_flops / target.peak_flops)))[0]


def _ratio(task: Task, target: DeviceSpec, reference: DeviceSpec) -> float:
    flops, nbytes = task.flops or 0.0, task.bytes_accessed or 0.0
    if flops <= 0 and nbytes <= 0:
        return reference.peak_flops / target.peak_flops
    return target.work(flops, nbytes) / reference.work(flops, nbytes)


def derive_times(graph: TaskGraph, target: DeviceSpec, reference: str, reference_spec: DeviceSpec) -> TaskGraph:
    """``graph`` with times on ``target.name`` derived from its times on ``reference`` (module docstring).

    >>> from diviml.catalogue import spec
    >>> g = TaskGraph.create([Task("mm", {"a100": 1e-3 + spec("a100").launch_overhead}, flops=19.5e9)], [])
    >>> round(derive_times(g, spec("t4"), "a100", spec("a100")).tasks[0].time["t4"] * 1e3, 3)  # 1 ms x 19.5/8.1 + launch
    2.42
    """
    tasks = []
    for task in graph.tasks:
        if reference not in task.time:
            tasks.append(task)
            continue
        ratio = _ratio(task, target, reference_spec)

        def derived(t: float) -> float:
            return 0.0 if t <= 0 else target.launch_overhead + max(0.0, t - reference_spec.launch_overhead) * ratio
        time = {**task.time, target.name: derived(task.time[reference])}
        table = dict(task.time_by_batch)
        if reference in table:
            table[target.name] = {b: derived(t) for b, t in table[reference].items()}
        allowed = task.allowed_types
        if allowed is not None and reference in allowed:
            allowed = allowed | {target.name}
        tasks.append(replace(task, time=time, time_by_batch=table, allowed_types=allowed))
    return replace(graph, tasks=tuple(tasks))


def complete_for(graph: TaskGraph, platform: Platform) -> tuple[TaskGraph, tuple[str, ...]]:
    """``graph`` with times for every device type of ``platform`` it lacks and can derive, and a line per
    derived type saying from what. Types with no spec, or a graph with no type to derive from, stay missing."""
    said = []
    for name in sorted(platform.device_types - graph.device_types):
        target = platform.spec_of(name)
        if target is None:
            continue
        reference = reference_type(graph, target, platform)
        if reference is None:
            continue
        graph = derive_times(graph, target, reference, platform.spec_of(reference))
        origin = "the platform file" if name in platform.device_specs else "the catalogue"
        said.append(f"device type {name}: times derived from {reference}'s by the roofline ratio of their specs "
                    f"({name} from {origin})")
    return graph, tuple(said)
