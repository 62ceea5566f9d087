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
relaxation starts near it. A latency model of at most :data:`PROBES_UP_TO` jobs is minimised for
:data:`OPTIMISE_SHARE` of its time; where that does not prove it, the rest goes on cutoffs above its bound
(:mod:`.engines.probes`): each one CP-SAT proves that no schedule meets is a bound (``CP-SAT cutoffs``). On
sixteen randomly wired DAGs of 32-64 tasks at 30 s (``benchmarks/random_bounds.py``) the five unproven gaps
went from 2.9-9.6% to 1.5-6.5% (one plan 0.2% worse, the others as good or better), one proven in 18 s before is
at 1.8%; at 96 tasks 6.0% and 8.9% became 4.4% and 4.6%;
at 128 tasks no cutoff was proven in the time and the plans were 0.5-1.5% worse, hence the limit. Probing made
CP-SAT's portfolio of sixteen workers on two cores (kept for its lb-tree search, which proved bounds)
unnecessary, and one worker a core found better plans.

Batch objective: the batch is split the same way for every task into L near-equal sub-batches
(L = 1 .. number of devices, skipping splits whose HEFT makespan is far behind the best split's, see
:func:`.search.promising_splits`; each solved in turn with its share of the time), so each sub-batch flows
through the graph as its own copy (see :mod:`.jobs`); the best is kept. The bound is the problem's general
lower bound, since splits outside that family are not searched; the whole batch's model (L = 1) bounds the
plans that run every task whole, which the plan reports (``whole_task_bound``, :func:`.search.whole_task_note`).
"""

from __future__ import annotations

import time
from dataclasses import replace

from ..bounds import CP_SAT, energetic_cuts, lower_bound
from ..plan import Plan
from ..problem import Problem
from . import split
from .engines.cpsat import solve_jobs
from .engines.jobs import JobGraph
from .engines.modules import detect, piece_sizes
from .engines.outcome import Outcome
from .engines.probes import probe
from .search import exact_search, start_hint

NAME = "exact"
PIECE_SIZE = 20  # consecutive pieces are merged up to this many tasks
OPTIMISE_SHARE = 1 / 3  # of a latency model's time, for minimising; the rest probes cutoffs (:mod:`.engines.probes`)
PROBES_UP_TO = 100  # jobs: a latency model of more is only minimised (see the module's docstring)


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0, workers: int | None = None,
          symmetry: str = "tasks", resolution: int = 10_000_000, decompose: bool = True, piece_size: int = PIECE_SIZE,
          progress=None, on_incumbent=None) -> Plan:
    """``decompose``: solve latency problems piece by piece between series points where that is exact;
    consecutive pieces are merged up to ``piece_size`` tasks (fewer solves, each still small).
    ``on_incumbent(value)`` is called with the objective of every solution CP-SAT finds on the whole graph
    (time scale units, rounded down: within about 1e-6 of the plan's value), e.g. to time how soon a quality
    is reached; a decomposed solve calls it once, with its plan."""
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

    def engine(jobs: JobGraph, upper: float, budget: float, start: Plan | None) -> Outcome:
        began = time.perf_counter()
        floor = lower_bound(problem)  # a bound of every plan, so of those of this split too
        hint = start_hint(jobs, symmetry, start)  # before the model's clock starts: it counts against the budget
        cuts = energetic_cuts(problem) if jobs.sizes == (problem.batch_size,) else ()
        probing = problem.objective.kind == "latency" and len(jobs.jobs) <= PROBES_UP_TO
        model = dict(upper=upper, seed=seed, workers=workers, symmetry=symmetry, resolution=resolution, cuts=cuts,
                     on_incumbent=on_incumbent)  # the one model, minimised and then probed
        left = budget - (time.perf_counter() - began)
        out = solve_jobs(jobs, time_limit=left * (OPTIMISE_SHARE if probing else 1.0), hint=hint, progress=progress,
                         floor=floor, **model)
        if probing and out.status in ("timeout", "unknown"):  # not proven: probe cutoffs above its bound
            out = probe(jobs, replace(out, bound=max(out.bound, floor)),
                        time_limit=budget - (time.perf_counter() - began), progress=progress, **model)
        return out

    return exact_search(problem, NAME, engine, time_limit=time_limit, symmetry=symmetry, seed=seed, progress=progress,
                        engine_bound=CP_SAT)


LARGEST_PIECE_SHARE = 0.75  # decompose only where no piece holds more of the tasks than this


def pays_to_decompose(problem: Problem, chain) -> bool:
    """Whether the latency solve goes piece by piece: more than one piece, none holding more than
    :data:`LARGEST_PIECE_SHARE` of the (non-constant) tasks, and the pieces' optima join into the optimum."""
    sizes = piece_sizes(chain)
    return (problem.objective.kind == "latency" and len(sizes) > 1
            and max(sizes) <= LARGEST_PIECE_SHARE * sum(sizes) and split.separable(problem, chain))
