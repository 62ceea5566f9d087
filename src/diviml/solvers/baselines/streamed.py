"""Baseline for the batch objective: the batch streamed through a pipeline's placement, a sub-batch at a time.

A pipeline's split of the model over the devices (the pipeline objective's: each device's load small at the
largest, inside its memory) is taken as it is, every task cut into the same L near-equal sub-batches on its
device, and each device runs its parts sub-batch by sub-batch (all its tasks for the first, then for the
second, ...), so that while one device works on a sub-batch the next works on the one before, as GPipe and
DiviML's pipelined batches do. The makespan is about the first sub-batch's latency plus L - 1 times the
slowest device's share; the L of least makespan is kept. Where a model must be spread over several devices
for its memory (GPT-3's prefill over six-servers: 8 requests in 11.37 s from split, one after another), this
keeps every device busy.

The placements come from the pipeline solvers' fast programs: whole layers in runs (:mod:`..pipeline.layers`,
a model of layers) and a topological order cut into runs (:mod:`..pipeline.chain`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from ...errors import InfeasibleError, InputError
from ...plan import Plan
from ...problem import Objective, Problem
from ...simulate import schedule
from ..engines.jobs import near_equal_split
from ..engines.plans import Stopwatch, make_plan, plans_of
from ..pipeline.chain import split_chain
from ..pipeline.layers import split_layers

__all__ = ["solve", "streamed_plan"]

NAME = "streamed"


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0) -> Plan:
    if problem.objective.kind != "batch":
        raise InputError("streamed streams a batch through a pipeline: use --objective batch")
    plan = streamed_plan(problem, Stopwatch(time_limit))
    if plan is None:
        raise InfeasibleError("no pipeline placement to stream the batch through (co-location groups, a training "
                              "graph, or no order of the devices holds the model in their memory): use heft, split "
                              "or exact")
    return plan


def streamed_plan(problem: Problem, watch: Stopwatch) -> Plan | None:
    """The best streamed plan (module doc) over the placements and the sub-batch counts 1 .. batch size, or None
    for other objectives, or where neither program finds a placement (co-location groups, training graphs,
    memory)."""
    if problem.objective.kind != "batch":
        return None
    pipe = replace(problem, objective=Objective("pipeline"))
    placements = [plan.placement for plan in plans_of([
        lambda: split_layers(pipe, Stopwatch(max(watch.left / 4, 1e-3)), solver=NAME),
        lambda: split_chain(pipe, Stopwatch(max(watch.left / 4, 1e-3)), solver=NAME)])]
    best: tuple[float, Mapping[str, str], tuple[int, ...]] | None = None
    for placement in placements:
        for count in range(1, problem.batch_size + 1):
            if watch.expired and best is not None:
                break
            sizes = near_equal_split(problem.batch_size, count)
            makespan = schedule(problem, _parts(placement, sizes), _order(problem, placement, sizes)).makespan
            if best is None or makespan < best[0]:
                best = (makespan, placement, sizes)
    if best is None:
        return None
    _, chosen, sizes = best
    return make_plan(problem, _parts(chosen, sizes), order=_order(problem, chosen, sizes), solver=NAME,
                     status="feasible", watch=watch, notes=[
                         f"a pipeline's placement over {len(set(chosen.values()))} devices, the batch streamed "
                         f"through it in {len(sizes)} sub-batches ({'/'.join(map(str, sizes))} samples)"])


def _parts(placement: Mapping[str, str], sizes: tuple[int, ...]) -> dict[str, list[tuple[str, int]]]:
    """Every task cut into ``sizes`` on its device."""
    return {t: [(d, b) for b in sizes] for t, d in placement.items()}


def _order(problem: Problem, placement: Mapping[str, str], sizes: tuple[int, ...]) -> dict[str, list[tuple[str, int]]]:
    """Each device's parts sub-batch by sub-batch, in topological order within one: a part waits only on parts
    of the same sub-batch earlier in the order, so no device waits on one that waits on it."""
    order: dict[str, list[tuple[str, int]]] = {d.name: [] for d in problem.platform.devices}
    for k in range(len(sizes)):
        for t in problem.graph.topological_order:
            order[placement[t]].append((t, k))
    return order
