"""Module detection for MILP-SPLIT: cut a task graph into a chain of modules.

1. *Constants* (tasks no graph input reaches: weight transposes, attention masks, positional tables) do
   not count as connections; each joins the module of its first consumer, so a tensor shared by every
   layer cannot glue the graph into one module.
2. Along a topological order of the other tasks, a *cut* after position p is crossed by the producers at or
   before p that have a consumer after p. A cut crossed by one tensor, that of the task at p, is a *series
   point*: every path from an input to an output passes through that task, so everything before it is its
   ancestor and everything after it its descendant, and the latency of the whole is the sum over modules.
3. Series points split the graph into groups; consecutive small groups are merged up to ``max_size``
   tasks (one exact solve covers them). A group up to ``whole_size`` tasks (twice ``max_size`` unless
   given) stays one module: a cut at a series point is exact, a cut inside a group is not (measured on
   inception_v3, whose blocks have 20-32 tasks: cut at 20, the plan was 9% worse than exact's). A larger
   group (dense blocks, randomly wired stages) is cut further at *multi-channel* cuts, chosen by a dynamic
   program that minimises the tensors crossing the cuts (and the number of modules), with every module at
   most ``max_size`` tasks, unless ``cut_large`` is off (the exact solver's decomposition, which cuts at
   series points only).

Each module's *exit* is its last non-constant task: the task whose device is the join's state.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ...errors import InputError
from ...graph import TaskGraph


@dataclass(frozen=True)
class Module:
    tasks: tuple[str, ...]  # topological order, constants included
    exit: str  # the last non-constant task; its device is the state of the join
    inputs: int  # distinct tensors entering from earlier modules (constants not counted); 1 at a series point


@dataclass(frozen=True)
class Chain:
    modules: tuple[Module, ...]
    series_points: tuple[str, ...]
    constants: frozenset[str]

    @cached_property
    def module_of(self) -> dict[str, int]:
        return {t: i for i, m in enumerate(self.modules) for t in m.tasks}

    @property
    def widest_cut(self) -> int:
        return max((m.inputs for m in self.modules), default=0)

    @property
    def multi_channel_cuts(self) -> int:
        return sum(1 for m in self.modules[1:] if m.inputs > 1)


def constants(graph: TaskGraph) -> frozenset[str]:
    """Tasks that no graph input reaches (all sources are inputs when no task is of kind 'input')."""
    inputs = [t.id for t in graph.tasks if t.kind == "input"]
    if not inputs:
        return frozenset()
    reached = set(inputs)
    for t in graph.topological_order:
        if t in reached:
            reached.update(graph.successors[t])
    return frozenset(t.id for t in graph.tasks if t.id not in reached)


def cut_widths(graph: TaskGraph, order: list[str]) -> list[int]:
    """widths[p] = distinct tensors crossing the cut right after position p of ``order``."""
    position = {t: i for i, t in enumerate(order)}
    diff = [0] * (len(order) + 1)
    for t in order:
        last = max((position[v] for v in graph.successors[t] if v in position), default=position[t])
        diff[position[t]] += 1
        diff[last] -= 1
    widths, running = [], 0
    for p in range(len(order)):
        running += diff[p]
        widths.append(running)
    return widths


def series_points(graph: TaskGraph, order: list[str]) -> list[int]:
    """Positions p of ``order`` whose task every input-to-output path passes through."""
    position = {t: i for i, t in enumerate(order)}
    n = len(order)
    jumps = [0] * (n + 1)  # edges (real, or from a virtual source / to a virtual sink) passing over p

    def over(a: int, b: int) -> None:  # an edge from position a to b passes over a+1 .. b-1
        if b - a > 1:
            jumps[a + 1] += 1
            jumps[b] -= 1

    for t in order:
        preds = [u for u in graph.predecessors[t] if u in position]
        succs = [v for v in graph.successors[t] if v in position]
        if not preds:
            over(-1, position[t])
        if not succs:
            over(position[t], n)
        for v in succs:
            over(position[t], position[v])
    out, running = [], 0
    for p in range(n):
        running += jumps[p]
        if running == 0:
            out.append(p)
    return out


def piece_sizes(chain: Chain) -> list[int]:
    """Tasks of each piece of ``chain`` that take part in the schedule (constants not counted)."""
    return [sum(t not in chain.constants for t in m.tasks) for m in chain.modules]


def detect(graph: TaskGraph, max_size: int = 20, crossing_weight: float = 2.0, *, cut_large: bool = True,
           whole_size: int | None = None) -> Chain:
    """The chain of modules of ``graph``; ``crossing_weight``: how many modules one extra crossing tensor
    is worth avoiding in the cut DP; groups between series points of at most ``whole_size`` tasks (default
    ``2 * max_size``; every group with ``cut_large=False``) stay whole."""
    if max_size < 1:
        raise InputError(f"module size must be at least 1 task, got {max_size}")
    whole_size = 2 * max_size if whole_size is None else whole_size
    if whole_size < max_size:
        raise InputError(f"whole size ({whole_size}) must be at least the module size ({max_size})")
    fixed = constants(graph)
    order = [t for t in graph.topological_order if t not in fixed]
    widths = cut_widths(graph, order)
    series = series_points(graph, order)
    ends = _cuts(order, widths, series, max_size, whole_size if cut_large else len(order), crossing_weight)
    # modules of non-constant tasks: (start, end] position ranges
    spans, begin = [], 0
    for e in ends:
        spans.append(order[begin:e + 1])
        begin = e + 1
    index = {t: i for i, span in enumerate(spans) for t in span}
    for t in reversed(graph.topological_order):  # a constant joins its first consumer's module
        if t in fixed:
            index[t] = min((index[v] for v in graph.successors[t]), default=0)
    members: list[list[str]] = [[] for _ in spans]
    for t in graph.topological_order:
        members[index[t]].append(t)
    modules = []
    for i, span in enumerate(spans):
        entering = {u for t in span for u in graph.predecessors[t] if u not in fixed and index[u] < i}
        modules.append(Module(tuple(members[i]), span[-1], len(entering)))
    return Chain(tuple(modules), tuple(order[p] for p in series), fixed)


def _cuts(order: list[str], widths: list[int], series: list[int], max_size: int, whole_size: int,
          weight: float) -> list[int]:
    """Last positions of the modules: series groups merged up to ``max_size``, those over ``whole_size``
    cut by a DP."""
    n = len(order)
    if n == 0:
        return []
    group_ends = sorted(set(series) | {n - 1})
    ends: list[int] = []
    begin = 0
    for e in group_ends:
        if e - begin + 1 > whole_size:
            ends.extend(_dp_cuts(widths, begin, e, max_size, weight))
        else:
            ends.append(e)
        begin = e + 1
    # merge consecutive modules while they stay within max_size (a dropped cut can only help the quality)
    pieces: list[tuple[int, int]] = []
    start = 0
    for e in ends:
        if pieces and e - pieces[-1][0] + 1 <= max_size:
            pieces[-1] = (pieces[-1][0], e)
        else:
            pieces.append((start, e))
        start = e + 1
    return [e for _, e in pieces]


def _dp_cuts(widths: list[int], begin: int, end: int, max_size: int, weight: float) -> list[int]:
    """Cut positions begin..end into pieces of at most ``max_size``, minimising the number of pieces plus
    ``weight`` times the extra tensors crossing each cut."""
    inf = float("inf")
    size = end - begin + 1
    cost = [inf] * (size + 1)  # cost[k]: best for the first k positions
    back = [0] * (size + 1)
    cost[0] = 0.0
    for k in range(1, size + 1):
        pos = begin + k - 1  # a cut right after pos
        penalty = 1.0 + (weight * (widths[pos] - 1) if k < size else 0.0)
        for j in range(max(0, k - max_size), k):
            if cost[j] + penalty < cost[k]:
                cost[k], back[k] = cost[j] + penalty, j
    out, k = [], size
    while k > 0:
        out.append(begin + k - 1)
        k = back[k]
    return sorted(out)
