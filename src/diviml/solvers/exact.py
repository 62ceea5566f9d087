"""Exact latency and batch scheduling with OR-Tools CP-SAT (the default exact engine).

Latency: where the graph has series points (tasks every input-to-output path passes through) and nothing
couples the pieces between them (no memory limit that can bind, no co-location, no constants that could
run early), the optimum is the chain DP of the pieces' optima: each piece is solved with CP-SAT for every
(entry device, exit device) pair and joined exactly (:func:`.split.solve_chain`, cuts at series points
only). The plan is proven optimal when every piece is, and the DP on the pieces' bounds is a valid bound
otherwise. Graphs without that structure, graphs where one piece holds more than 3/4 of the tasks (each
of its (entry, exit) solves would get a slice of the time for little gain: on randomly wired DAGs of 48-96
tasks the monolithic model found plans 4-6% better at 20 s, ``benchmarks/auto_choice.py``), and
``decompose=False`` get the monolithic model (:mod:`.cpsat`). Measured on the layered benchmark DAGs:
N = 320, K = 3 proven in about 2 s, where the monolithic model ends 60 s at a 4-10% gap.
A monolithic latency model of more than :data:`WINDOWS_FROM` tasks and at most :data:`WINDOWS_UP_TO` first
spends a quarter of its time bounding windows of the graph (:mod:`.engines.windows`); the whole model starts
from that bound (its makespan at least it), named ``CP-SAT windows`` where the model proves no more.

Batch objective: the batch is split the same way for every task into L near-equal sub-batches
(L = 1 .. number of devices, skipping splits whose HEFT makespan is far behind the best split's, see
:func:`.search.promising_splits`; each solved in turn with its share of the time), so each sub-batch flows
through the graph as its own copy (see :mod:`.jobs`); the best is kept. The bound is the problem's general
lower bound, since splits outside that family are not searched.
"""

from __future__ import annotations

import time
from dataclasses import replace

from ..bounds import CP_SAT, WINDOWS
from ..plan import Plan
from ..problem import Problem
from . import split
from .engines.cpsat import solve_jobs
from .engines.jobs import JobGraph
from .engines.modules import detect
from .engines.outcome import Outcome
from .engines.windows import window_bound
from .search import exact_search, heft_hint

NAME = "exact"
PIECE_SIZE = 20  # consecutive pieces are merged up to this many tasks
WINDOWS_FROM = 24  # a latency model of more tasks than this is bounded by windows of it first ...
WINDOWS_UP_TO = 300  # ... up to this many: on more, windows of 16-32 tasks see too little of the graph for their time
WINDOW_SHARE = 0.25  # of the time, for the windows' bound (before the whole model's search, which starts from it)


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0, workers: int | None = None,
          symmetry: str = "tasks", resolution: int = 10_000_000, decompose: bool = True, piece_size: int = PIECE_SIZE,
          window_share: float = WINDOW_SHARE, progress=None, on_incumbent=None) -> Plan:
    """``decompose``: solve latency problems piece by piece between series points where that is exact;
    consecutive pieces are merged up to ``piece_size`` tasks (fewer solves, each still small).
    ``on_incumbent(value)`` is called with the objective of every solution CP-SAT finds on the whole graph
    (time scale units, rounded down: within about 1e-6 of the plan's value), e.g. to time how soon a quality
    is reached; a decomposed solve calls it once, with its plan. ``window_share``: the share of the time that a
    latency model of :data:`WINDOWS_FROM` to :data:`WINDOWS_UP_TO` tasks spends first on windows of the graph
    (:func:`.engines.windows.window_bound`) for a stronger bound (0: none)."""
    if decompose and problem.objective.kind == "latency":
        chain = detect(problem.graph, piece_size, cut_large=False)
        if pays_to_decompose(problem, chain):
            plan = split.solve_chain(problem, chain, time_limit=time_limit, seed=seed, workers=workers,
                                     module_time_limit=time_limit, progress=progress, label="exact")
            if on_incumbent:
                on_incumbent(plan.objective)
            note = (f"decomposed at series points into {len(chain.modules)} pieces, each solved exactly for every "
                    "(entry, exit) device pair and joined by the chain DP")
            return replace(plan, solver=NAME, notes=(note,) + plan.notes)

    def engine(jobs: JobGraph, upper: float, budget: float) -> Outcome:
        began, floor = time.perf_counter(), 0.0
        if problem.objective.kind == "latency" and WINDOWS_FROM < len(problem.graph) <= WINDOWS_UP_TO and window_share:
            floor = window_bound(problem, upper=upper, time_limit=budget * window_share, seed=seed, workers=workers,
                                 progress=progress)
        out = solve_jobs(jobs, upper=upper, time_limit=budget - (time.perf_counter() - began), seed=seed,
                         workers=workers, symmetry=symmetry, resolution=resolution, hint=heft_hint(jobs, symmetry),
                         progress=progress, on_incumbent=on_incumbent, floor=floor)
        if floor > 0 and out.status != "optimal" and out.bound <= floor * (1 + 1e-6):  # no more than the windows'
            return replace(out, stats={**(out.stats or {}), "bound_source": WINDOWS})
        return out

    return exact_search(problem, NAME, engine, time_limit=time_limit, symmetry=symmetry, progress=progress,
                        engine_bound=CP_SAT)


LARGEST_PIECE_SHARE = 0.75  # decompose only where no piece holds more of the tasks than this


def piece_sizes(chain) -> list[int]:
    """Tasks of each piece of ``chain`` that take part in the schedule (constants not counted)."""
    return [sum(t not in chain.constants for t in m.tasks) for m in chain.modules]


def pays_to_decompose(problem: Problem, chain) -> bool:
    """Whether the latency solve goes piece by piece: more than one piece, none holding more than
    :data:`LARGEST_PIECE_SHARE` of the (non-constant) tasks, and the pieces' optima join into the optimum."""
    sizes = piece_sizes(chain)
    return (problem.objective.kind == "latency" and len(sizes) > 1
            and max(sizes) <= LARGEST_PIECE_SHARE * sum(sizes) and split.separable(problem, chain))
