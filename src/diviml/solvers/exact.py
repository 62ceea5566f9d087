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
The monolithic model starts from the problem's lower bound (its makespan at least it) and takes the rows of
the energetic LP that hold that bound up as cuts (:func:`..bounds.energetic_cuts`), so that CP-SAT's own
relaxation starts near it; a small latency model runs a portfolio of :data:`PORTFOLIO` workers. With
``window_share`` > 0, a model of more than :data:`WINDOWS_FROM` tasks and at most :data:`WINDOWS_UP_TO`
first spends that share of its time bounding windows of the graph (:mod:`.engines.windows`), named
``CP-SAT windows`` where the model proves no more: no longer by default, since with the energetic cuts the
whole model's time proved more (randomly wired DAGs of 48 and 64 tasks at 30 s: 4.7% and 2.9% gaps without
the windows, 5.2% and 2.9% with a quarter of the time on them; the other six proven twice as fast without).

Batch objective: the batch is split the same way for every task into L near-equal sub-batches
(L = 1 .. number of devices, skipping splits whose HEFT makespan is far behind the best split's, see
:func:`.search.promising_splits`; each solved in turn with its share of the time), so each sub-batch flows
through the graph as its own copy (see :mod:`.jobs`); the best is kept. The bound is the problem's general
lower bound, since splits outside that family are not searched.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

from ..bounds import CP_SAT, WINDOWS, energetic_cuts, lower_bound
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
WINDOWS_FROM = 24  # a latency model of more tasks than this may be bounded by windows of it first ...
WINDOWS_UP_TO = 300  # ... up to this many: on more, windows of 16-32 tasks see too little of the graph for their time
WINDOW_SHARE = 0.0  # of the time, for the windows' bound (before the whole model's search): none by default
# CP-SAT workers for a whole latency model of at most PORTFOLIO_UP_TO jobs, however few the cores: two workers
# run only CP-SAT's default LP search and an LNS; sixteen bring lb-tree search and objective-lb search, which
# prove the bound. Randomly wired DAGs on paper-server at 30 s on 2 cores: 48 tasks 6.1% -> 4.7% (bound),
# 64 tasks 3.7% -> 2.1% and 6.2% -> proven optimal, 80 tasks 4.3% -> 2.8%; at 96-250 tasks the plans were
# 1-4% worse and the bounds no better (``benchmarks/random_bounds.py``)
PORTFOLIO = 16
PORTFOLIO_UP_TO = 80


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
        began, windows = time.perf_counter(), 0.0
        if problem.objective.kind == "latency" and WINDOWS_FROM < len(problem.graph) <= WINDOWS_UP_TO and window_share:
            windows = window_bound(problem, upper=upper, time_limit=budget * window_share, seed=seed, workers=workers,
                                   progress=progress)
        floor = max(windows, lower_bound(problem))  # a bound of every plan, so of those of this split too
        hint = heft_hint(jobs, symmetry)  # before the model's clock starts: its time counts against the budget
        cuts = energetic_cuts(problem) if jobs.sizes == (problem.batch_size,) else ()
        out = solve_jobs(jobs, upper=upper, time_limit=budget - (time.perf_counter() - began), seed=seed,
                         workers=_workers(problem, jobs, workers), symmetry=symmetry, resolution=resolution, hint=hint,
                         progress=progress, on_incumbent=on_incumbent, floor=floor, cuts=cuts)
        if windows >= floor > 0 and out.status != "optimal" and out.bound <= windows * (1 + 1e-6):
            return replace(out, stats={**(out.stats or {}), "bound_source": WINDOWS})  # no more than the windows'
        return out

    return exact_search(problem, NAME, engine, time_limit=time_limit, symmetry=symmetry, progress=progress,
                        engine_bound=CP_SAT)


def _workers(problem: Problem, jobs: JobGraph, workers: int | None) -> int | None:
    """The CP-SAT workers of a whole model: the user's, else :data:`PORTFOLIO` for a small latency model,
    else one a core (None)."""
    if workers or problem.objective.kind != "latency" or len(jobs.jobs) > PORTFOLIO_UP_TO:
        return workers
    return max(PORTFOLIO, os.cpu_count() or 1)


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
