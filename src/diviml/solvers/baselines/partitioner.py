"""Baseline: a graph partitioner (METIS through pymetis), as in NeurIPS 2020 (Scotch there) and DiviML.

The co-location classes become vertices weighted by compute and joined by edges weighted by transfer
cost; METIS cuts them into one part per device with target part weights proportional to each device's
speed (so a slow CPU gets a small part), minimising the cut. Parts go to devices, then a repair pass moves
classes that a device may not run or cannot hold to the feasible device where they add least. Several
seeds and imbalance settings are tried; the best plan under the problem's objective is kept.
For latency, batch and contiguous pipelines, each partition is also repaired to acyclic (DiviML's partitioner baseline: the
parts, ordered by their tasks' mean topological position, must form a DAG, so each device runs its part as
one block once its inputs arrive, and a contiguous pipeline's devices hold convex sets); both are
evaluated and the better is kept, but for a contiguous pipeline only a contiguous one; there the parts
are also read as runs of a topological order of the classes, with the partition's shares.
"""

from __future__ import annotations

import math

import numpy as np
import pymetis

from ...errors import InfeasibleError
from ...native import native_output_discarded
from ...problem import Problem
from ...validate import contiguity_violations
from ..auto import PIPELINE
from ..engines.plans import Stopwatch, evaluate, make_plan
from ..pipeline.common import Contracted
from ..pipeline.evaluate import ClassEvaluator

NAME = "partitioner"
SCALE = 1_000_000  # METIS wants integer weights


def _metis_parts(ev: ClassEvaluator, seed: int, ufactor: int) -> np.ndarray:
    c = ev.contracted
    n = c.num_classes
    finite = np.where(np.isfinite(ev.time), ev.time, np.nan)
    total = max(float(ev.fastest.sum()), 1e-300)
    vweights = [max(1, int(round(SCALE * w / total))) for w in ev.fastest]
    adj: list[dict[int, float]] = [dict() for _ in range(n)]
    ks, pcs, ccs, hop = ev._edges
    for k, a, b in zip(ks, pcs, ccs):
        w = float(np.max(hop[k]))
        if a != b:
            adj[a][b] = adj[a].get(b, 0.0) + w
            adj[b][a] = adj[b].get(a, 0.0) + w
    scale = max((w for row in adj for w in row.values()), default=1.0) or 1.0
    xadj, adjncy, eweights = [0], [], []
    for row in adj:
        for b, w in sorted(row.items()):
            adjncy.append(b)
            eweights.append(max(1, int(round(1000 * w / scale))))
        xadj.append(len(adjncy))
    share = _part_weights(finite)
    # a device whose share is under half a task's gets no part: METIS bisects down to parts of no vertices
    # there and prints "Cannot bisect a graph with 0 vertices" (the repair still places tasks on it)
    active = [j for j in range(len(share)) if share[j] * n >= 0.5] or [int(np.argmax(share))]
    if len(active) == 1 or n <= len(active):  # METIS fails (and prints) when asked for as many parts as vertices
        return np.full(n, active[0], dtype=np.int64)
    weights = [share[j] for j in active]
    opts = pymetis.Options(seed=seed, ufactor=ufactor)
    with native_output_discarded():
        _, parts = pymetis.part_graph(len(active), adjacency=pymetis.CSRAdjacency(xadj, adjncy), vweights=vweights,
                                      eweights=eweights, tpwgts=[w / sum(weights) for w in weights], options=opts)
    return np.array(active, dtype=np.int64)[np.array(parts, dtype=np.int64)]


def _part_weights(finite: np.ndarray) -> list[float]:
    """Each device's share of the graph, in proportion to its speed (the inverse of the time it would take to
    run every task it may run), each share at least a thousandth of an equal one: METIS rejects shares of 0,
    and a device that runs everything in no time would otherwise take every share."""
    n_parts = finite.shape[1]
    work = np.nansum(finite, axis=0)
    runs = np.isfinite(finite).any(axis=0)
    speed = np.where(runs, 1.0 / np.maximum(work, 1e-12), 0.0)
    share = speed / speed.sum() if speed.sum() > 0 else np.full(n_parts, 1.0 / n_parts)
    share = np.maximum(share, 1e-3 / n_parts)
    return list(share / share.sum())


def _repair(ev: ClassEvaluator, dev: np.ndarray) -> np.ndarray | None:
    """Move classes off devices that cannot run or hold them, to the feasible device they load least."""
    n_dev = len(ev.devices)
    dev = dev.copy()
    for c in range(len(dev)):
        if not math.isfinite(ev.time[c, dev[c]]):
            dev[c] = int(np.nanargmin(np.where(np.isfinite(ev.time[c]), ev.time[c], np.nan)))
    used = np.bincount(dev, weights=ev.size, minlength=n_dev)
    for c in np.argsort(-ev.size):
        j = dev[c]
        if used[j] <= ev.capacity[j]:
            continue
        options = [k for k in range(n_dev) if k != j and math.isfinite(ev.time[c, k])
                   and used[k] + ev.size[c] <= ev.capacity[k]]
        if not options:
            return None
        k = min(options, key=lambda k: ev.time[c, k])
        used[j] -= ev.size[c]
        used[k] += ev.size[c]
        dev[c] = k
    return dev


def _in_runs(ev: ClassEvaluator, dev: np.ndarray) -> np.ndarray:
    """The parts read as consecutive runs of a topological order of the classes (a contiguous split with the
    partition's shares): devices ranked by the mean position of their part's classes, each taking as many
    classes in a row as its part holds."""
    order = ev.contracted.topological_order
    position = {c: k for k, c in enumerate(order)}
    parts: dict[int, list[int]] = {}
    for c, d in enumerate(dev):
        parts.setdefault(int(d), []).append(position[c])
    out = dev.copy()
    start = 0
    for d in sorted(parts, key=lambda d: sum(parts[d]) / len(parts[d])):
        for c in order[start:start + len(parts[d])]:
            out[c] = d
        start += len(parts[d])
    return out


def acyclic(problem: Problem, placement: dict[str, str]) -> dict[str, str]:
    """The placement with every task moved, in topological order, to the latest-ranked part among its
    producers' when its own part ranks earlier (parts ranked by mean topological position), so that the
    graph of parts is acyclic. Moves that a task's allowed devices, memory or co-location forbid are skipped."""
    graph, platform = problem.graph, problem.platform
    topo = {t: i for i, t in enumerate(graph.topological_order)}
    members: dict[str, list[int]] = {}
    for t, d in placement.items():
        members.setdefault(d, []).append(topo[t])
    rank = {d: (sum(v) / len(v), d) for d, v in members.items()}
    placement = dict(placement)
    used = {d.name: 0.0 for d in platform.devices}
    for t, d in placement.items():
        used[d] += graph.by_id[t].memory_bytes
    for t in graph.topological_order:
        producers = [placement[u] for u in graph.predecessors[t]]
        if not producers:
            continue
        target = max(producers, key=lambda d: rank[d])
        here = placement[t]
        task = graph.by_id[t]
        if rank[target] <= rank[here] or task.colocation in problem.colocation_groups:
            continue
        if target in problem.allowed_devices[t] and used[target] + task.memory_bytes <= platform.by_name[target].memory_bytes:
            used[here] -= task.memory_bytes
            used[target] += task.memory_bytes
            placement[t] = target
    return placement


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0):
    watch = Stopwatch(time_limit)
    contiguous = problem.objective.kind == "pipeline" and problem.objective.contiguous
    contracted = Contracted(problem, fuse_cycles=contiguous)
    ev = ClassEvaluator(problem, contracted)
    ev.require_placeable()
    best = None
    for trial, ufactor in enumerate((30, 100, 300, 1000)):
        for s in range(3):
            dev = _repair(ev, _metis_parts(ev, seed * 7 + s, ufactor))
            if dev is None:
                continue
            placements = [ev.placement(dev)]
            if problem.objective.kind in ("latency", "batch") or contiguous:
                placements.append(acyclic(problem, placements[0]))
            if contiguous:
                runs = _repair(ev, _in_runs(ev, dev))
                if runs is not None:
                    placements.append(ev.placement(runs))
            for placement in placements:
                if contiguous and contiguity_violations(problem, placement):
                    continue
                value = evaluate(problem, {t: [(d, problem.batch_size)] for t, d in placement.items()})[0]
                if best is None or value < best[0]:
                    best = (value, placement)
            if watch.expired:
                break
        if watch.expired:
            break
    if best is None:
        exact = PIPELINE.get(problem.objective.kind, "exact or split")
        raise InfeasibleError("the partitioner found no split that fits the memory limits" + (
            " and is contiguous (its parts, made acyclic, still left a device and came back): use dp or ip"
            if contiguous else f" (its repair moves tasks one by one): try {exact} (an exact search packs memory) or raise "
                               "the memory limit"))
    return make_plan(problem, placement=best[1], solver=NAME, status="feasible", watch=watch)
