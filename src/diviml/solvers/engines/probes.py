"""Lower bounds by probing: makespans that CP-SAT proves no schedule meets (destructive lower bounds).

Minimising, CP-SAT's bound on a job graph without series points climbs slowly: its relaxation sees the
devices' work and the paths, not how they interlock. Asked instead whether any schedule ends by a cutoff a
little above the bound, it propagates every job's window (its head, and the cutoff less its tail) and often
proves quickly that none does; the cutoff is then a bound. On a randomly wired DAG of 48 tasks on a CPU and two
GPUs, cutoffs 1-5% above the energetic LP were proven out in 0.1, 0.6, 2.3, 8.4 and 18.8 s, where minimising
for 300 s proved 4.5% (``benchmarks/random_bounds.py``). A probe that finds a schedule instead is a better
plan. Cutoffs rise from the bound in steps of :data:`FIRST_STEP` of the gap, each probe given all the time
left: a proof takes about three times longer with each step, so a probe cut short leaves too little time for
a smaller step to add much (giving each probe half the time, then halving the step, proved less on the
48-task DAG: 3.3% against 2.6%; doubling the step after a quick proof jumped to cutoffs not proven in time).

A probe proves by search, so on two workers both search the whole model (:data:`PORTFOLIO`), one with CP-SAT's LP at
level 1 and one with none; one worker has the LP at level 1 (single cutoffs on the seven DAGs below: 7.3-25 s, where
level 2 took 4.6-37 s and left one undecided in 40 s). CP-SAT's own choice for two (its LP at level 2, the other
worker on neighbourhoods of a schedule, which cannot prove a cutoff out) left six of the seven 48-64-task DAGs of
``benchmarks/results/random_bounds.md`` open at 30 s (2.3-6.5%); this proved two of those six in each of two runs,
and over four runs left the others at 1.4-2.1%, 2.5-3.6%, 2.8-3.7% and 5.4-6.9%, where the LP at level 2 beside none
left them at 1.4-2.1%, 2.5-3.5%, 3.4-3.8% and 6.5-6.7% over three (`docs/bounds-research.md`).
"""

from __future__ import annotations

import time
from dataclasses import replace

from ...bounds import CUTOFFS
from .cpsat import solve_jobs
from .jobs import JobGraph
from .outcome import Outcome

FIRST_STEP = 1 / 8  # of the gap between bound and incumbent at the start: each cutoff's distance above the last
LEAST_PROBE_S = 0.05  # no probe is started with less time than this
PORTFOLIO = ("default_lp", "no_lp")  # CP-SAT's subsolvers for a probe, one a worker (up to two), on the whole model


def probe(jobs: JobGraph, found: Outcome, *, upper: float, time_limit: float, resolution: int = 10_000_000,
          progress=None, **model) -> Outcome:
    """``found`` (a minimisation's answer on ``jobs``) with its bound raised by cutoffs proven infeasible and
    its schedule replaced by any better one a probe finds, within ``time_limit`` seconds. ``upper`` is the
    makespan that set ``found``'s time scale (the same ticks here), and the incumbent where ``found`` has no
    schedule; ``model``: the rest of the minimisation's keywords to :func:`.cpsat.solve_jobs` (seed, workers,
    symmetry, cuts, on_incumbent, which hears each better schedule found), so that the probes ask of the same
    model. The answer is "optimal" where the cutoff one tick below the incumbent is proven infeasible;
    ``progress`` hears a line per probe."""
    ends = time.perf_counter() + time_limit
    tick = max(upper, 1e-300) / resolution
    best, lower, probes = found, found.bound, 0
    incumbent = found.objective if found.device_of is not None and found.objective is not None else upper
    step = max((incumbent - lower) * FIRST_STEP, tick)
    while (left := ends - time.perf_counter()) > LEAST_PROBE_S:
        cutoff = min(lower + step, incumbent - tick)
        if cutoff <= lower:  # no makespan in ticks between the bound and the incumbent: the incumbent is optimal
            best = replace(best, status="optimal") if best.device_of is not None else best
            break
        began = time.perf_counter()
        out = solve_jobs(jobs, upper=upper, time_limit=left, resolution=resolution, cutoff=cutoff, first_only=True,
                         floor=lower, portfolio=PORTFOLIO, **model)
        probes += 1
        met = out.objective if out.device_of is not None else None  # a schedule's makespan, by the cutoff
        if progress:
            said = ("no schedule ends by it (the new bound)" if out.status == "infeasible" else
                    f"a schedule of {met:.6g} meets it" if met is not None else "not decided in the time")
            progress(f"  cutoff {cutoff:.6g}: {said}, {time.perf_counter() - began:.1f} s")
        if out.status == "infeasible":
            lower = cutoff
        elif met is not None:  # the new incumbent
            best, incumbent = replace(out, status="timeout"), met
            step = min(step, (incumbent - lower) / 2)
        else:  # not proven either way: the time is up
            break
    stats = {**(found.stats or {}), "probes": float(probes)}
    if lower > found.bound:
        stats["bound_source"] = CUTOFFS
    return replace(best, bound=max(found.bound, lower), stats=stats)
