"""Pipelines from layer patterns: each copy of a model's repeated layer placed by one of a few patterns.

A *pattern* places one copy of the layer (a numbered block: :func:`..engines.layers.numbered_blocks`), a
device per task. Copies that share a pattern run one after another, so the stream between them (the residual)
crosses devices as it does between two copies of the pattern, and a device's load is the sum over the patterns
of their copies' compute and hops (the simulator's rule). Which patterns, and how many copies each, is a column
generation and an integer mix (:mod:`.pattern_mix`). The runs are dealt out grouped by the device that leaves
the stream (:func:`_realise`); the tasks outside the copies (an embedding, a head) go to the host CPU of the
server the start plan gave them, where its memory allows.

Whole layers per device (the layer DP, the chain) leave memory idle on a device with more of it than of speed,
and speed on one with more of that: on GPT-3 over six-servers the V100s were full of weights at 1.05-1.27 s
while the A100s set the pace at 1.70 s with 9 GB each to spare. The patterns give the V100s the attention,
whose weights are small beside its compute, and the A100s more of the feed-forward weights: the integer mix
1.674 s, dealt out 1.685-1.688 s, polished 1.677-1.680 s in a 60 s solve that ends after 22 s (the chain's
1.7014 s before; bound 1.638 s). Over a100-ib-2x8 18.57 s in 6 s (18.58 s in 58 s).
"""

from __future__ import annotations

import numpy as np

from ...plan import Plan
from ...problem import Problem
from ...simulate import pipeline_loads
from ..engines.layers import numbered_blocks
from ..engines.plans import Stopwatch, make_plan
from .pattern_mix import Layer, generate, integer_mix

__all__ = ["repeated_layer", "split_patterns"]

NAME = "layer patterns"
MIN_COPIES = 4  # identical layers in a row, at least: fewer are left to the other starts
HOST_SHARE = 0.05  # of the largest load: what the tasks outside the copies may add to a host CPU


def split_patterns(problem: Problem, watch: Stopwatch, start: Plan | None, *, solver: str = NAME) -> Plan | None:
    """The split described above, or None where it does not apply (not a non-contiguous inference or
    PipeDream pipeline, co-location groups, fewer than :data:`MIN_COPIES` identical layers in a row, no start
    plan for the other tasks) or finds no integer mix in time."""
    objective = problem.objective
    if (objective.kind != "pipeline" or objective.contiguous or problem.colocation_groups or start is None
            or (problem.is_training and objective.training == "gpipe")):
        return None
    layer = repeated_layer(problem)
    if layer is None:
        return None
    others = _others(problem, layer, start)
    extra_load, extra_memory = _extra(problem, others)
    columns = generate(problem, layer, extra_load, extra_memory, watch)
    counts = integer_mix(problem, layer, columns, extra_load, extra_memory, watch)
    if counts is None:
        return None
    placement = _realise(problem, layer, counts, others)
    moved = not others.items() <= start.placement.items()
    if moved:  # the master priced the other tasks' compute, not their tensors: where they stay may be better
        kept = _realise(problem, layer, counts, {t: start.placement[t] for t in others})
        if _fits(problem, kept) and pipeline_loads(problem, kept).objective < pipeline_loads(problem, placement).objective:
            placement, moved = kept, False
    return make_plan(problem, placement=placement, solver=solver, status="feasible", watch=watch, notes=[
        f"{len(layer.copies)} copies of the repeated layer by {len(counts)} patterns (column generation, then "
        "whole copies), the other tasks " + ("on the host CPUs of the servers the start plan gave them" if moved
                                              else "as the start plan placed them")])


def _fits(problem: Problem, placement: dict[str, str]) -> bool:
    """Whether the tasks of ``placement`` fit every device's memory."""
    held: dict[str, float] = {}
    for t, d in placement.items():
        held[d] = held.get(d, 0.0) + problem.graph.by_id[t].memory_bytes
    return all(b <= problem.platform.by_name[d].memory_bytes for d, b in held.items())


def _others(problem: Problem, layer: Layer, start: Plan) -> dict[str, str]:
    """The tasks outside the layer's copies (an embedding, a head): each on the host CPU of the server the start
    plan put it on, where that host may run it, has the memory for them all and takes at most
    :data:`HOST_SHARE` of the start's largest load more time for them; else where the start put them. Weights
    on an accelerator take memory the patterns would use better (GPT-3's embedding and head, 2.5 GB each: a
    V100 so filled held a layer's attention less); a model mostly outside its copies keeps its start."""
    inside = {t for copy in layer.copies for t in copy}
    platform = problem.platform
    host = {d.server: d.name for d in platform.devices if d.is_host}
    placed = {t: d for t, d in start.placement.items() if t not in inside}
    moved = {t: host.get(platform.by_name[d].server, d) for t, d in placed.items()}
    moved = {t: (d if d in problem.allowed_devices[t] else placed[t]) for t, d in moved.items()}
    added: dict[str, float] = {}
    for t, d in moved.items():
        added[d] = added.get(d, 0.0) + problem.time(t, d)
    if not _fits(problem, moved) or any(a > HOST_SHARE * start.objective for a in added.values()):
        return placed
    return moved


def _extra(problem: Problem, others: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """Per device, the compute and memory of the tasks outside the copies."""
    index = {d.name: k for k, d in enumerate(problem.platform.devices)}
    load, memory = np.zeros(len(index)), np.zeros(len(index))
    for t, d in others.items():
        load[index[d]] += problem.time(t, d)
        memory[index[d]] += problem.graph.by_id[t].memory_bytes
    return load, memory


def _signature(problem: Problem, copy: list[str], after: list[str] | None) -> tuple:
    """What the patterns see of a copy, tasks by position: times per device, memory, tensor sizes, and the
    edges inside it and into the copy ``after`` it."""
    graph = problem.graph
    devices = [d.name for d in problem.platform.devices]
    here = {t: i for i, t in enumerate(copy)}
    there = {t: i for i, t in enumerate(after or [])}
    rows = tuple((tuple(problem.time(t, d) if d in problem.allowed_devices[t] else None for d in devices),
                  graph.by_id[t].memory_bytes, graph.by_id[t].output_bytes, graph.by_id[t].transfer_time)
                 for t in copy)
    inner = tuple(sorted((here[u], here[v]) for u in copy for v in graph.successors[u] if v in here))
    links = tuple(sorted((here[u], there[v]) for u in copy for v in graph.successors[u] if v in there))
    return rows, inner, links


def repeated_layer(problem: Problem) -> Layer | None:
    """The longest run of identical consecutive numbered blocks (:func:`..engines.layers.numbered_blocks`)
    whose tensors go only to their own copy or the next (the last copy's, and the first's inputs, anywhere),
    or None."""
    layers = numbered_blocks(problem)
    if len(layers) < MIN_COPIES:
        return None
    sigs = [_signature(problem, layers[k], layers[k + 1] if k + 1 < len(layers) else None) for k in range(len(layers))]
    best, begin = (0, 0), 0
    for k in range(1, len(layers) + 1):
        # copy k-1 ends the run when k is past the end or differs (its links may differ: it feeds the head)
        if k == len(layers) or sigs[k][:2] != sigs[begin][:2] or sigs[k - 1][2] != sigs[begin][2]:
            if k - begin > best[1] - best[0]:
                best = (begin, k)
            begin = k
    lo, hi = best
    if hi - lo < MIN_COPIES:
        return None
    copies = [layers[k] for k in range(lo, hi)]
    graph = problem.graph
    member = {t: k for k, copy in enumerate(copies) for t in copy}
    for k, copy in enumerate(copies):
        if ((k + 1 < len(copies) and any(member.get(v, -1) not in (k, k + 1) for t in copy for v in graph.successors[t]))
                or (k > 0 and any(member.get(u, -1) not in (k - 1, k) for t in copy for u in graph.predecessors[t]))):
            return None  # a tensor skips a copy, or enters or leaves the run midway: patterns would misprice it
    rows, inner, links = sigs[lo]
    return _grouped(copies, rows, inner, links)


def _grouped(copies: list[list[str]], rows: tuple, inner: tuple, links: tuple) -> Layer:
    """The layer with each task of no time and no memory and one producer in its producer's group."""
    producers_of: dict[int, list[int]] = {}
    for u, v in inner:
        producers_of.setdefault(v, []).append(u)
    group = list(range(len(rows)))
    for i, (row_times, row_memory, _, _) in enumerate(rows):  # positions are in topological order
        if row_memory == 0 and all(not t for t in row_times) and len(producers_of.get(i, ())) == 1:
            group[i] = group[producers_of[i][0]]
    ids = {g: k for k, g in enumerate(sorted(set(group)))}
    group = [ids[g] for g in group]
    n_devices = len(rows[0][0])
    times: list[list[float | None]] = [[0.0] * n_devices for _ in ids]
    memory = [0.0] * len(ids)
    for i, (row_times, row_memory, _, _) in enumerate(rows):
        memory[group[i]] += row_memory
        for d, t in enumerate(row_times):
            current = times[group[i]][d]
            times[group[i]][d] = None if t is None or current is None else current + t
    producers = []
    for i in range(len(rows)):
        inside = sorted({group[v] for u, v in inner if u == i} - {group[i]})
        onward = sorted({group[v] for u, v in links if u == i})
        if inside or onward:
            producers.append((i, tuple(inside), tuple(onward)))
    return Layer(tuple(map(tuple, copies)), tuple(group), tuple(map(tuple, times)), tuple(memory), tuple(producers))


def _realise(problem: Problem, layer: Layer, counts: list[tuple[tuple[int, ...], int]],
             others: dict[str, str]) -> dict[str, str]:
    """The placement: each pattern's copies in one run, the runs grouped by the device their copies leave the
    stream on (a pattern's load counts the stream from its own exit: after a run of the same exit it costs
    that again), groups in platform order, each group's first run one that reads the stream where the group
    before left it, if any; the tasks outside the copies as ``others`` has them. GPT-3 over six-servers: the
    largest load 1.714 s with the runs chained by where the stream goes next, 1.688 s grouped (1.674 s in the
    integer master, which prices each run's stream from its own exit)."""
    devices = [d.name for d in problem.platform.devices]
    exits = [position for position, _, onward in layer.producers if onward]

    def exit_of(pattern: tuple[int, ...]) -> int:
        return min((pattern[layer.group[p]] for p in exits), default=0)

    def reads(pattern: tuple[int, ...], device: int | None) -> bool:
        return any(pattern[g] == device for _, _, onward in layer.producers for g in onward)

    groups: dict[int, list[tuple[tuple[int, ...], int]]] = {}
    for pattern, n in counts:
        groups.setdefault(exit_of(pattern), []).append((pattern, n))
    order: list[tuple[tuple[int, ...], int]] = []
    before: int | None = None
    for device in sorted(groups):
        order += sorted(groups[device], key=lambda run: (not reads(run[0], before), -run[1]))
        before = device
    placement = dict(others)
    copy = 0
    for pattern, n in order:
        for _ in range(n):
            for position, t in enumerate(layer.copies[copy]):
                placement[t] = devices[pattern[layer.group[position]]]
            copy += 1
    return placement
