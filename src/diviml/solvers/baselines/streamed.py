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
from time import perf_counter
from typing import Mapping, Sequence

from ...bounds import CRITICAL_PATH, critical_path_bound, share_lower_bound
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
    """The best streamed plan (module doc) over the placements and the sub-batch counts 1 .. batch size, as many
    as the time allows (:func:`_best_stream`), or None for other objectives, or where neither program finds a
    placement (co-location groups, training graphs, memory)."""
    if problem.objective.kind != "batch":
        return None
    pipe = replace(problem, objective=Objective("pipeline"))
    share_lower_bound(pipe, critical_path_bound(pipe), CRITICAL_PATH)  # only the placements are wanted here
    placements = [plan.placement for plan in plans_of([
        lambda: split_layers(pipe, Stopwatch(max(watch.left / 4, 1e-3)), solver=NAME),
        lambda: split_chain(pipe, Stopwatch(max(watch.left / 4, 1e-3)), solver=NAME)])]
    best = _best_stream(problem, placements, watch)
    if best is None:
        return None
    _, chosen, sizes = best
    return make_plan(problem, _parts(chosen, sizes), order=_order(problem, chosen, sizes), solver=NAME,
                     status="feasible", watch=watch, notes=[
                         f"a pipeline's placement over {len(set(chosen.values()))} devices, the batch streamed "
                         f"through it in {len(sizes)} sub-batches ({'/'.join(map(str, sizes))} samples)"])


def _best_stream(problem: Problem, placements: Sequence[Mapping[str, str]],
                 watch: Stopwatch) -> tuple[float, Mapping[str, str], tuple[int, ...]] | None:
    """(makespan, placement, sub-batch sizes) of the best stream found while the time lasts: the counts 1, the
    powers of two and the batch size first, then the others nearest the best of those first. A simulation's
    time grows with its parts, so one that would not leave time for the chosen plan's own (simulated and
    validated: about three more) is not started. Its seconds per part are the largest simulation's so far: a
    small one's are mostly fixed cost (a 128-part simulation took 2.4e-5 s per part here, an 8,192-part one
    1.5e-5), and pricing the largest by them stopped searches short of the finest stream under load."""
    n = problem.batch_size
    # a task that mixes samples waits for every sub-batch, which a stream's order cannot hold: the whole batch
    counts = [1] if problem.whole_batch else sorted({1, n} | {2 ** k for k in range(n.bit_length())})
    coarse = len(counts)
    best: tuple[float, Mapping[str, str], tuple[int, ...]] | None = None
    rate, largest = 0.0, 0  # seconds per part of the simulation with the most parts so far, and its parts
    i = 0
    while True:
        if i == coarse and best is not None and not problem.whole_batch:
            centre = len(best[2])
            counts += sorted(set(range(1, n + 1)) - set(counts), key=lambda c: (abs(c - centre), c))
        if i >= len(counts):
            return best
        for placement in placements:
            if best is not None and rate * len(placement) * (counts[i] + 3 * len(best[2])) > watch.left:
                return best
            sizes = near_equal_split(n, counts[i])
            began = perf_counter()
            makespan = schedule(problem, _parts(placement, sizes), _order(problem, placement, sizes)).makespan
            parts = len(placement) * counts[i]
            if parts >= largest:
                rate, largest = (perf_counter() - began) / parts, parts
            if best is None or makespan < best[0]:
                best = (makespan, placement, sizes)
        i += 1


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
