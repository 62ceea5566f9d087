"""Rows that strengthen the batch path-work LP where the batch is small enough to price each part size alone.

The LP averages plans: a task's samples "in parts of the whole batch" on two devices pay half a launch on each,
and tasks run whole on different devices in parallel branches cost only their transfers. These rows, each valid
for every plan, take some of that back:

- **at least two parts unless whole**: a task is one part of the whole batch or at least two parts;
- **chain overlap**: along a chain S of the graph (pairwise comparable tasks) the tasks run whole take disjoint
  intervals, and while one runs on another device, a device can only run tasks incomparable to it (every part
  of an ancestor has ended, no part of a descendant has begun), so its idle time is at least those intervals
  less the work it has on such tasks;
- **part configurations**: parts of a chain's tasks that run at the same moment hold different samples, so
  the times spent in configurations of part sizes (one per device, at most the batch in all) cover every
  device's time on the chain and sum to at most the makespan;
- **transfers per device pair**: each edge's samples are coupled between the two tasks' device shares, and
  the mean sample's path pays each crossing at its own pair's transfer of one sample.

On the zoo at a batch of 8 on paper-server they lift the LP 0.5-5% (googlenet 1.838 -> 1.930 ms, resnet50
4.257 -> 4.394, gpt2-small 10.005 -> 10.301) for 1-10 s (``benchmarks/batch_relaxations.py``).
"""

from __future__ import annotations

import math
from functools import partial
from time import perf_counter

import networkx as nx

from ..problem import Problem
from ._lp import _KeyedLP

__all__ = ["strengthen", "chain_cover", "configurations"]

CHAINS = 12  # at most this many chains in the cover
TASKS_UP_TO = 1_000  # larger graphs get no rows: building the chain overlap takes time quadratic in the tasks
CONFIGURATIONS_UP_TO = 2_000  # per chain: beyond (many devices), no configuration rows
PAIR_COLUMNS_UP_TO = 200_000  # edges x device pairs: beyond, no coupling


def strengthen(problem: Problem, lp: _KeyedLP, unit: float, ranges: list[tuple[int, int]], path: dict[str, dict],
               work: dict[str, dict], stop: float | None) -> bool:
    """Add the rows above to the batch LP ``lp`` (built with size ``ranges``; ``path[t]`` and ``work[d]``: its
    coefficients of the mean sample's time in task t and of device d's work, by column); False where ``stop``
    passed first or a part size is not priced alone (the rows need a column of whole-batch parts and exact part
    counts)."""
    n = problem.batch_size
    if any(lo != hi for lo, hi in ranges) or len(problem.graph) > TASKS_UP_TO:
        return False
    chains = chain_cover(problem)
    on_device: dict[str, dict[str, dict]] = {d: {} for d in work}  # device -> task -> {column: work coefficient}
    for d, columns in work.items():
        for key, x in columns.items():
            on_device[d].setdefault(key[1], {})[key] = x
    steps = [partial(_two_parts_unless_whole, path=path), partial(_chain_overlap, chains=chains, stop=stop),
             partial(_configurations, chains=chains), partial(_pair_transfers, path=path, unit=unit)]
    for step in steps:
        if stop is not None and perf_counter() > stop:
            return False
        step(problem, lp, on_device, n)
    return stop is None or perf_counter() <= stop


def chain_cover(problem: Problem, most: int = CHAINS) -> list[list[str]]:
    """Heaviest paths (whole-batch time on the fastest device) through tasks not yet covered, until all are.

    >>> from diviml import Objective, Problem, preset
    >>> from diviml.generators import layered_dag
    >>> chains = chain_cover(Problem(layered_dag(8, seed=0), preset("paper-server"), Objective("batch", 2)))
    >>> sorted({t for c in chains for t in c}) == sorted(layered_dag(8, seed=0).topological_order)
    True
    """
    graph, n = problem.graph, problem.batch_size
    weight = {t: min(problem.time(t, d, n) for d in problem.allowed_devices[t]) for t in graph.topological_order}
    covered: set[str] = set()
    chains: list[list[str]] = []
    while len(covered) < len(graph) and len(chains) < most:
        best: dict[str, float] = {}
        previous: dict[str, str | None] = {}
        for t in graph.topological_order:
            before = max(graph.predecessors[t], key=best.__getitem__, default=None)
            gain = weight[t] if t not in covered else 1e-9 * weight[t]
            best[t], previous[t] = (best[before] if before else 0.0) + gain, before
        chain: list[str] = []
        at: str | None = max(graph.topological_order, key=best.__getitem__)
        while at is not None:
            chain.append(at)
            at = previous[at]
        if covered.issuperset(chain):
            break
        covered.update(chain)
        chains.append(chain[::-1])
    return chains


def _two_parts_unless_whole(problem: Problem, lp: _KeyedLP, on_device: dict, n: int, path: dict[str, dict]) -> None:
    """parts + (share in one part of the batch) >= 2: one part of the batch, or at least two parts (column
    ``("u", t, d, b - 1)`` holds the samples in parts of b)."""
    for t in problem.graph.topological_order:
        lp.ub({key: -1.0 / (key[3] + 1) - (1.0 / n if key[3] + 1 == n else 0.0) for key in path[t]}, -2.0)


def _chain_overlap(problem: Problem, lp: _KeyedLP, on_device: dict, n: int, chains: list[list[str]],
                   stop: float | None = None) -> None:
    """Per chain and device d: d's work, plus the chain's whole tasks on other devices, less what d overlaps
    them with (its work on tasks incomparable to each, shared out), is at most C."""
    graph = problem.graph
    dag = nx.DiGraph(list(graph.edges))
    dag.add_nodes_from(graph.topological_order)
    related = {t: nx.ancestors(dag, t) | nx.descendants(dag, t) | {t} for t in graph.topological_order}
    position = {t: i for i, t in enumerate(graph.topological_order)}
    for c, chain in enumerate(chains):
        if stop is not None and perf_counter() > stop:
            return  # the caller sees the time is up and drops the LP
        for d, tasks in on_device.items():
            row: dict = {("C",): -1.0, **{key: x for columns in tasks.values() for key, x in columns.items()}}
            overlaps: dict[str, list] = {}
            for s in chain:
                elsewhere = {("u", s, o, n - 1): on_device[o][s][("u", s, o, n - 1)]
                             for o in problem.allowed_devices[s] if o != d}  # its work in one part of the batch
                for key, x in elsewhere.items():
                    row[key] = row.get(key, 0.0) + x
                lp.col(("o", c, d, s))
                row[("o", c, d, s)] = -1.0
                lp.ub({("o", c, d, s): 1.0, **{key: -x for key, x in elsewhere.items()}})  # at most the intervals
                share: dict = {("o", c, d, s): 1.0}
                for u in sorted(tasks.keys() - related[s], key=position.__getitem__):
                    lp.col(("y", c, d, u, s))
                    share[("y", c, d, u, s)] = -1.0
                    overlaps.setdefault(u, []).append(("y", c, d, u, s))
                lp.ub(share)  # overlap with s's interval: d's work on tasks incomparable to s
            for u, cols in overlaps.items():
                lp.ub({**{key: 1.0 for key in cols}, **{key: -x for key, x in tasks[u].items()}})
            lp.ub(row)


def configurations(devices: int, n: int, most: int = CONFIGURATIONS_UP_TO) -> list[tuple[int, ...]] | None:
    """Every configuration of part sizes, a size or none (0) per device with at most ``n`` in all and some part,
    in lexicographic order; None where there are more than ``most`` (there are ``C(devices + n, n) - 1``, counted
    before any is made: 18 devices at a batch of 4 have 7,314, which a walk over every size on every device took
    40 s to find more than 2,000 of).

    >>> configurations(2, 2)
    [(0, 1), (0, 2), (1, 0), (1, 1), (2, 0)]
    >>> configurations(18, 4) is None
    True
    """
    if math.comb(devices + n, n) - 1 > most:
        return None
    prefixes: list[tuple[int, ...]] = [()]  # device by device, each prefix within n (never more than the answer)
    for _ in range(devices):
        prefixes = [p + (b,) for p in prefixes for b in range(n - sum(p) + 1)]
    return prefixes[1:]  # the first is all zeros: no part


def _configurations(problem: Problem, lp: _KeyedLP, on_device: dict, n: int, chains: list[list[str]]) -> None:
    """Per chain: time in each configuration of part sizes (a size or none per device, at most n in all)."""
    devices = [d.name for d in problem.platform.devices]
    configs = configurations(len(devices), n)
    if configs is None:
        return
    for c, chain in enumerate(chains):
        for k in range(len(configs)):
            lp.col(("Z", c, k))
        lp.ub({("C",): -1.0, **{("Z", c, k): 1.0 for k in range(len(configs))}})
        for i, d in enumerate(devices):
            for b in range(1, n + 1):
                row: dict = {("Z", c, k): -1.0 for k, combo in enumerate(configs) if combo[i] == b}
                row.update({key: x for t in chain for key, x in on_device[d].get(t, {}).items() if key[3] == b - 1})
                lp.ub(row)


def _pair_transfers(problem: Problem, lp: _KeyedLP, on_device: dict, n: int, path: dict[str, dict],
                    unit: float) -> None:
    """Per edge: a coupling of the two tasks' device shares; the mean sample's path pays each crossing at its
    pair's transfer of one sample."""
    graph = problem.graph
    allowed = problem.allowed_devices
    if sum(len(allowed[u]) * len(allowed[v]) for u, v in graph.edges) > PAIR_COLUMNS_UP_TO:
        return
    for u, v in graph.edges:
        pairs = [(a, b) for a in allowed[u] for b in allowed[v]]
        for a, b in pairs:
            lp.col(("F", u, v, a, b))
        lp.eq({("F", u, v, a, b): 1.0 for a, b in pairs})
        for a in allowed[u]:
            lp.ub({**{key: 1.0 / n for key in on_device[a][u]}, **{("F", u, v, a, b): -1.0 for b in allowed[v]}})
        for b in allowed[v]:
            lp.ub({**{key: 1.0 / n for key in on_device[b][v]}, **{("F", u, v, a, b): -1.0 for a in allowed[u]}})
        row: dict = {("e", u): 1.0, ("e", v): -1.0, **path[v]}
        row.update({("F", u, v, a, b): problem.transfer(u, a, b, 1.0 / graph.batch_size) * unit
                    for a, b in pairs if a != b})
        lp.ub(row)
