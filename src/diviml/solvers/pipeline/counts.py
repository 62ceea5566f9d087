"""Pipelines from the work MILP's counts: how many tasks of each class each device runs, made into a split.

The work MILP (:func:`diviml.bounds.integer_work_bound`) assigns whole tasks, alike ones counted together, to
devices within their memory, minimising the largest compute load; it leaves out transfers. Where the loads
are mostly compute and memory, its assignment is nearly a plan: GPT-3's decoding step overflows the GPUs with
weights and KV cache, the host CPUs run the rest and set the pace, and a host pays no hops. Each device takes
its count of each class, the class's tasks in topological order dealt out in consecutive blocks (neighbours
stay together); a task of no time and no memory (a view: the counts put it anywhere) goes with its producer.
The simulator then prices the hops (the pipeline IP's warm start polishes the best start, :mod:`.polish`).
GPT-3's decoding step over a100-ib-2x8: 3.084 s from the chain, 2.575 s from the counts (the bound: 2.529 s);
over h100-nvlink-8 6.013 -> 5.057 s, the bound; over six-servers 0.862 -> 0.701 s (bound 0.660 s; with the
views dealt by the counts too, 0.825 s: they piled up on the last device). Where hops dominate (a prefill
over six servers) the counts are far from a plan and the other starts win.
"""

from __future__ import annotations

from ...bounds import integer_work_counts
from ...bounds._simple import work_class_of
from ...plan import Plan
from ...problem import Problem
from ..engines.plans import Stopwatch, make_plan

__all__ = ["split_counts"]

NAME = "work MILP counts"


def split_counts(problem: Problem, watch: Stopwatch, *, solver: str = NAME) -> Plan | None:
    """The split described above, or None where the objective is not a non-contiguous pipeline or no work
    MILP was solved for the problem (its bound solves it where whole tasks may lift the work LP)."""
    if problem.objective.kind != "pipeline" or problem.objective.contiguous:
        return None
    counts = integer_work_counts(problem)
    if counts is None:
        return None
    position = {t: i for i, t in enumerate(problem.graph.topological_order)}
    members_of: dict[tuple, list[tuple[str, ...]]] = {}
    for members, key in work_class_of(problem).items():
        members_of.setdefault(key, []).append(members)
    devices = [d.name for d in problem.platform.devices]
    placement: dict[str, str] = {}
    free: list[tuple[str, ...]] = []
    for key, items in members_of.items():
        if len(counts.get(key, ())) != len(devices) or sum(counts[key]) != len(items):
            return None  # not this problem's counts
        if key[0] == 0 and all(times is None or not any(times) for times in key[1]):
            free += items  # no time, no memory: it goes with its producer (the counts put it anywhere)
            continue
        items.sort(key=lambda members: min(position[t] for t in members))
        spots = [d for d, n in zip(devices, counts[key]) for _ in range(n)]
        for members, device in zip(items, spots):
            placement.update(dict.fromkeys(members, device))
    for members in sorted(free, key=lambda members: min(position[t] for t in members)):
        producers = [placement[u] for m in members for u in problem.graph.predecessors[m] if u in placement]
        device = next(d for d in producers + devices if all(d in problem.allowed_devices[m] for m in members))
        placement.update(dict.fromkeys(members, device))
    return make_plan(problem, placement=placement, solver=solver, status="feasible", watch=watch, notes=[
        f"the work MILP's whole-task counts over {len(devices)} devices, each class dealt out in topological order "
        "(a task of no time and no memory with its producer)"])
