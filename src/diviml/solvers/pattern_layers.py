"""Latency of a model of identical layers where memory binds: the memory segments bound's layer patterns, each
scheduled exactly, packed onto the devices and walked from layer to layer by a MILP.

The bound (:mod:`diviml.bounds._segments`) ends with a mix of whole placements, each a kind of device (a device
type on a group of alike servers) per task. Read layer by layer, a mix says how many layers take each *pattern*
of kinds: GPT-3 in FP32 over six-servers runs about 31 layers with the projections of query, key and value on
V100s and the rest on an H100, 27 with them on A100s, 37 on A100s alone. Each pattern, and a few the mix leaves
out (each accelerator kind alone; a kind of the most used patterns swapped for another), is scheduled exactly on
one server of each of its kinds: a layer alone, its input coming from one device, its output left on whichever
device suits it, where the next layer enters (a layer on an A100 server: 0.340 s, where ending on the device it
entered from cost 0.346 s). A pattern becomes *images* of itself on the identical servers and, shifted, on the
identical devices of each, each an arc from the device it enters from to the one it leaves its output on. A MILP
then chooses how many layers each image takes and the hand-offs between devices: a walk of arcs from the
device that feeds the first layer, flow kept at every device, whole layers within every device's memory beside
what the plan this starts from put outside the layers, the least summed makespans and hand-offs. The walk is
laid out by Hierholzer's algorithm, each layer's tasks run in its pattern's order, and the simulator times the
plan. Splicing the mix and letting HEFT place each task (:mod:`.baselines.priced_segments`) ran these patterns
2-5% slower than their exact schedules and packed the last bytes badly (GPT-3: an H100's layer with its
up-projection on a V100): GPT-3 FP32 over six-servers, 24.81 s there, 23.81 s here (the bound: 23.56 s).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from ..bounds import memory_segments_relaxation
from ..graph import TaskGraph
from ..native import native_output_discarded
from ..plan import Plan
from ..platform import Platform
from ..problem import Objective, Problem
from .engines.layers import numbered_blocks
from .engines.plans import Stopwatch, make_plan
from .server_layers import MIN_LAYERS, layer_shape

__all__ = ["pattern_layer_plan"]

NAME = "pattern layers"
MAX_PATTERNS = 24  # layer patterns scheduled, at most
SUBSTITUTED = 3  # the mixes' most used patterns whose kinds are swapped for others' (module doc)
LEAST_LAYERS = 0.5  # a pattern the mixes give fewer layers than this is left out
SCHEDULE_SHARE = 0.6  # of the time, for the patterns' one-layer schedules together
PATTERN_MIN_S = 0.4  # at least, per one-layer schedule (GPT-3's layer over six-servers: its best in 0.5 s, mostly)
PACK_SHARE = 0.5  # of the time left, for the packing MILP
_ENTRY = " (the layer's input)"  # the type of the device a one-layer problem's input comes from
_ENTRY_TASK = "diviml: the layer's input"  # the task that stands for it there


@dataclass(frozen=True)
class _Pattern:
    """A layer's exact schedule on representative servers: the device its input comes from, the device and start
    of each task (the layer's order), the device of its output, and its makespan from the input's finish."""
    entry: str
    devices: tuple[str, ...]
    starts: tuple[float, ...]
    exit: str
    makespan: float


def pattern_layer_plan(problem: Problem, incumbent: Plan | None, watch: Stopwatch) -> Plan | None:
    """The plan described above, starting from ``incumbent`` (the tasks outside the layers keep its devices),
    or None where it does not apply (not latency, no bound mix, fewer than ``MIN_LAYERS`` chained layers of one
    shape, each read from its predecessor's one output) or finds no packing in time."""
    if (problem.objective.kind != "latency" or problem.colocation_groups
            or incumbent is None):
        return None
    relaxation = memory_segments_relaxation(problem)
    common = _chained_layers(problem)
    if relaxation is None or not relaxation.mixes or common is None:
        return None
    graph = problem.graph
    ends = _ends(graph, common[len(common) // 2])
    assert ends is not None  # every layer of a chain has its two ends
    accelerators = [k for k, names in relaxation.kinds.items()
                    if not any(problem.platform.by_name[d].is_host for d in names)]
    signatures = _signatures(relaxation.mixes, common, accelerators)
    schedule_watch = Stopwatch(watch.left * SCHEDULE_SHARE)
    patterns: list[_Pattern] = []
    for n, signature in enumerate(signatures):
        if schedule_watch.left < PATTERN_MIN_S:
            break
        share = max(PATTERN_MIN_S, schedule_watch.left / (len(signatures) - n))
        pattern = _schedule(problem, relaxation.kinds, common[len(common) // 2], ends, signature, share)
        if pattern is not None and pattern not in patterns:
            patterns.append(pattern)
    if not patterns or watch.expired:
        return None
    inside = {t for b in common for t in b}
    outside = {t: d for t, d in incumbent.placement.items() if t not in inside}
    images = [(p, image) for p in patterns for image in _images(problem, p)]
    chosen = _pack(problem, common, [(p.makespan, image) for p, image in images], outside, watch)
    if chosen is None:
        return None
    sequence = [images[j] for j in chosen]
    placement, rank = dict(outside), _outside_ranks(problem, common, outside)
    for k, (block, (pattern, (_, devices, _))) in enumerate(zip(common, sequence)):
        placement.update(zip(block, devices))
        rank.update((t, (k, start, start + problem.time(t, d), i))  # a view beside a matmul first
                    for i, (t, start, d) in enumerate(zip(block, pattern.starts, devices)))
    order: dict[str, list[tuple[str, int]]] = {d.name: [] for d in problem.platform.devices}
    for t in sorted(placement, key=rank.__getitem__):
        order[placement[t]].append((t, 0))
    runs = 1 + sum(a != b for a, b in zip(chosen, chosen[1:]))
    return make_plan(problem, placement=placement, order=order, solver=NAME, status="feasible", watch=watch, notes=[
        f"{len(common)} layers in {runs} runs of {len({id(p) for p, _ in sequence})} exactly scheduled layer "
        f"patterns ({len(patterns)} tried, from the memory segments bound's mix)"])


def _chained_layers(problem: Problem) -> list[list[str]] | None:
    """The numbered blocks of the most common shape, where there are at least ``MIN_LAYERS`` of them and each
    after the first reads only the one output of the one before (a transformer's layers); else None."""
    blocks = numbered_blocks(problem)
    if len(blocks) < MIN_LAYERS:
        return None
    shapes = [layer_shape(problem.graph, b) for b in blocks]
    common_shape, count = Counter(shapes).most_common(1)[0]
    common = [b for b, s in zip(blocks, shapes) if s == common_shape]
    ends = [_ends(problem.graph, b) for b in common]
    if count < MIN_LAYERS or any(e is None for e in ends):
        return None
    if any(ends[k][0] != ends[k - 1][1] for k in range(1, len(common))):  # type: ignore[index]
        return None
    return common


def _ends(graph: TaskGraph, layer: list[str]) -> tuple[str, str] | None:
    """The one task outside ``layer`` that it reads, and the one task of it read outside; None unless one each."""
    inside = set(layer)
    sources = {u for t in layer for u in graph.predecessors[t] if u not in inside}
    exits = {t for t in layer if any(v not in inside for v in graph.successors[t])}
    return (sources.pop(), exits.pop()) if len(sources) == 1 and len(exits) == 1 else None


def _outside_ranks(problem: Problem, common: list[list[str]], outside: dict[str, str]) -> dict[str, tuple]:
    """Where each task outside the layers runs in the devices' orders: after the layers that come before it in
    topological order, in that order."""
    position = {t: i for i, t in enumerate(problem.graph.topological_order)}
    firsts = sorted(position[b[0]] for b in common)
    return {t: (bisect_left(firsts, position[t]) - 0.5, position[t], 0, 0) for t in outside}


def _signatures(mixes, common: list[list[str]], accelerators: list[str]) -> list[tuple[str | None, ...]]:
    """The layer patterns (a kind per task of the layer, None where the mix does not place it) the bound's mixes
    use most, by their weighted count of layers (each at least :data:`LEAST_LAYERS` in some mix), then each
    accelerator kind alone, then the :data:`SUBSTITUTED` most used with one accelerator kind swapped for another:
    the bound prices kinds, not devices, so a pattern it leaves out may pack the devices better (GPT-3 over
    six-servers: a few layers all on an H100, where the mix has none)."""
    best: dict[tuple, float] = {}
    for mix in mixes:
        weighted: Counter = Counter()
        for weight, kind_of in mix:
            for block in common:
                weighted[tuple(kind_of.get(t) for t in block)] += weight
        for signature, layers in weighted.items():
            best[signature] = max(best.get(signature, 0.0), layers)
    kept = sorted((s for s, layers in best.items() if layers >= LEAST_LAYERS), key=lambda s: -best[s])
    weighted_tasks = kept[0] if kept else ()
    out = kept + [tuple(k if placed else None for placed in weighted_tasks) for k in accelerators]
    for signature in kept[:SUBSTITUTED]:
        for a, b in itertools.permutations(accelerators, 2):
            if a in signature:
                out.append(tuple(b if k == a else k for k in signature))
    return list(dict.fromkeys(out))[:MAX_PATTERNS]


def _schedule(problem: Problem, kinds: dict[str, tuple[str, ...]], layer: list[str], ends: tuple[str, str],
              signature: tuple[str | None, ...], time_limit: float) -> _Pattern | None:
    """``layer`` scheduled exactly with each task on its kind of ``signature``, on one server of each kind (the
    first), its input coming from a device of the kind of its output (its first), its output on any device: the
    next layer enters there, so a layer need not move its output back (GPT-3 over an A100 server: 0.340 s a
    layer, where with its ends on one device 0.346 s). None where that problem cannot be built or solved."""
    from . import exact  # a solver: imported when used (exact's baselines include this module's plan)
    by_name, graph = problem.platform.by_name, problem.graph
    source, exit_ = ends
    entry_kind = signature[layer.index(exit_)] or next(filter(None, signature), None)
    if entry_kind is None:
        return None
    entry = kinds[entry_kind][0]
    chosen = {by_name[kinds[kind][0]].server for kind in filter(None, signature)}
    kind_of = {d: k for k, names in kinds.items() for d in names}
    devices = [replace(d, type=kind_of[d.name] + (_ENTRY if d.name == entry else ""))
               for d in problem.platform.devices if d.server in chosen]
    inside, tasks = set(layer), []
    for t, kind in zip(layer, signature):
        task = graph.by_id[t]
        times = {d.type: task.time[by_name[d.name].type] for d in devices if task.can_run_on(by_name[d.name].type)}
        tasks.append(replace(task, time=times, time_by_batch={}, colocation=None,
                             allowed_types=None if kind is None else frozenset({kind, kind + _ENTRY})))
    tasks.append(replace(graph.by_id[source], id=_ENTRY_TASK, time={d.type: 0.0 for d in devices}, time_by_batch={},
                         memory_bytes=0.0, colocation=None, allowed_types=frozenset({entry_kind + _ENTRY})))
    edges = [(u, v) for u in layer for v in graph.successors[u] if v in inside]
    edges += [(_ENTRY_TASK, t) for t in layer if source in graph.predecessors[t]]
    names = {d.name for d in devices}
    platform = Platform(tuple(devices), "pattern", peer_links={p: link for p, link in problem.platform.peer_links.items()
                                                               if p <= names}, network=problem.platform.network)
    try:
        sub = Problem(TaskGraph.create(tasks, edges, name=f"{graph.name} layer", time_unit=graph.time_unit),
                      platform, Objective("latency"))
        plan = exact.solve(sub, time_limit=time_limit)
    except Exception:  # noqa: BLE001 - a pattern the layer cannot take (a kind it cannot run on) is skipped
        return None
    device_of, start = plan.placement, {a.task: a.start or 0.0 for a in plan.assignments}
    return _Pattern(entry, tuple(device_of[t] for t in layer), tuple(start[t] for t in layer), device_of[exit_],
                    plan.objective)


_Image = tuple[str, tuple[str, ...], str]  # a pattern moved: its entry device, its tasks' devices, its exit device


def _images(problem: Problem, pattern: _Pattern) -> list[_Image]:
    """``pattern`` moved to each identical server of each of its servers and shifted, all groups of identical
    devices by the same number of places: its copies that put the same bytes elsewhere."""
    platform = problem.platform
    by_name = platform.by_name
    servers = sorted({by_name[d].server for d in (pattern.entry, *pattern.devices)})
    targets: dict[str, list[dict[str, str]]] = {}
    for server in servers:
        maps: list[dict[str, str]] = [{}]
        for group in platform.identical_servers:
            own = next((s for s in group if by_name[s[0]].server == server), None)
            if own is not None:
                maps = [dict(zip(own, other)) for other in group]
        targets[server] = maps
    group_of = {d: g for g in platform.identical_groups for d in g}
    shifts = max((len(group_of[d]) for d in pattern.devices if d in group_of), default=1)
    out: list[_Image] = []
    for choice in itertools.product(*(targets[s] for s in servers)):
        if len({by_name[next(iter(m.values()))].server if m else s for s, m in zip(servers, choice)}) < len(servers):
            continue  # two of the pattern's servers moved onto one
        moved = {d: e for m in choice for d, e in m.items()}
        for shift in range(shifts):
            def image_of(d: str, shift: int = shift) -> str:
                d = moved.get(d, d)
                g = group_of.get(d)
                return g[(g.index(d) + shift) % len(g)] if g else d
            out.append((image_of(pattern.entry), tuple(map(image_of, pattern.devices)), image_of(pattern.exit)))
    return list(dict.fromkeys(out))


def _pack(problem: Problem, common: list[list[str]], images: list[tuple[float, _Image]], outside: dict[str, str],
          watch: Stopwatch) -> list[int] | None:
    """The image of each layer in turn: a walk from the device feeding the first layer, each layer entered where
    the one before left its output or a hand-off away, the least summed makespans and hand-offs (a MILP: images
    are arcs between devices, taken whole layers many times, flow kept at every device, every device within
    its memory beside what ``outside`` puts on it); None where no walk is found in time."""
    graph, platform = problem.graph, problem.platform
    source, exit_ = _ends(graph, common[0])[0], _ends(graph, common[-1])[1]  # type: ignore[index]
    feed = outside[source]
    drains = [outside[v] for v in graph.successors[exit_] if v in outside]
    nodes = sorted({feed, *drains} | {e for _, (e, _, _) in images} | {x for _, (_, _, x) in images})
    jumps = [(d, e) for d in nodes for e in nodes if d != e]
    m, n_jumps, layer = len(images), len(jumps), common[0]
    columns = m + n_jumps + len(nodes)  # layers per image, hand-offs per pair of devices, the last layer's exit
    cost = np.concatenate([[c for c, _ in images], [problem.transfer(exit_, d, e) for d, e in jumps],
                           [max((problem.transfer(exit_, d, e) for e in drains), default=0.0) for d in nodes]])
    row = {d: r for r, d in enumerate(nodes)}
    flow = np.zeros((len(nodes), columns))  # out - in = 1 at the feed, -1 at the last exit
    for j, (_, (entry, _, exit_device)) in enumerate(images):
        flow[row[entry], j] += 1.0
        flow[row[exit_device], j] -= 1.0
    for j, (d, e) in enumerate(jumps):
        flow[row[d], m + j] += 1.0
        flow[row[e], m + j] -= 1.0
    for r in range(len(nodes)):
        flow[r, m + n_jumps + r] = 1.0
    held = dict.fromkeys((d.name for d in platform.devices), 0.0)
    for t, d in outside.items():
        held[d] += graph.by_id[t].memory_bytes
    memory = np.zeros((len(held), columns))
    device_row = {d: r for r, d in enumerate(held)}
    for j, (_, (_, devices, _)) in enumerate(images):
        for t, d in zip(layer, devices):
            memory[device_row[d], j] += graph.by_id[t].memory_bytes
    capacity = [platform.by_name[d].memory_bytes - h for d, h in held.items()]
    feed_row = [1.0 if d == feed else 0.0 for d in nodes]
    rows = [LinearConstraint(np.concatenate([np.ones(m), np.zeros(columns - m)])[None], len(common), len(common)),
            LinearConstraint(np.concatenate([np.zeros(m + n_jumps), np.ones(len(nodes))])[None], 1, 1),
            LinearConstraint(flow, feed_row, feed_row), LinearConstraint(memory, -np.inf, capacity)]
    upper = np.concatenate([np.full(m + n_jumps, len(common)), np.ones(len(nodes))])
    with native_output_discarded():
        res = milp(cost, integrality=np.ones(columns), bounds=Bounds(np.zeros(columns), upper), constraints=rows,
                   options={"time_limit": max(0.1, watch.left * PACK_SHARE), "mip_rel_gap": 1e-4})
    if res.x is None:
        return None
    taken = [int(round(v)) for v in res.x]
    arcs: list[tuple[str, str, int | None]] = [(images[j][1][0], images[j][1][2], j) for j in range(m)
                                               for _ in range(taken[j])]
    arcs += [(d, e, None) for k, (d, e) in enumerate(jumps) for _ in range(taken[m + k])]
    walk = [j for j in _walk(arcs, feed) if j is not None]
    return walk if len(walk) == len(common) else None


def _walk(arcs: list[tuple[str, str, int | None]], start: str) -> list[int | None]:
    """The arcs' labels along a walk from ``start`` that takes every arc once (Hierholzer's), where flow is kept;
    arcs it cannot reach are walked after it, from where they begin (the plan pays a hand-off there). Arcs of
    one label are taken one after the other where they can be, so that a layer pattern runs for many layers."""
    leaving: dict[str, list[tuple[str, str, int | None]]] = {}
    for arc in sorted(arcs, key=lambda a: (a[2] is None, -1 if a[2] is None else a[2]), reverse=True):
        leaving.setdefault(arc[0], []).append(arc)
    labels: list[int | None] = []
    while True:
        stack: list[tuple[str, int | None]] = [(start, None)]
        part: list[int | None] = []
        while stack:
            node, label = stack[-1]
            if leaving.get(node):
                _, head, next_label = leaving[node].pop()
                stack.append((head, next_label))
            else:
                stack.pop()
                part.append(label)
        labels += reversed(part[:-1])  # the first pushed, (start, None), is last out
        start = next((node for node, left in leaving.items() if left), "")
        if not start:
            return labels
