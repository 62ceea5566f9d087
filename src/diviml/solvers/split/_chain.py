"""The driver: every promising batch split joined (again with more time where the chain bounds), the best plan
of the join and the baselines, with its bound and counts."""

from __future__ import annotations

import os
from dataclasses import replace

from ...bounds import MODULE_DP
from ...errors import InfeasibleError
from ...plan import Plan
from ...problem import Problem
from ..engines.jobs import JobGraph
from ..engines.modules import Chain, detect
from ..engines.plans import Stopwatch, better_bound
from ..search import promising_splits
from ._join import join, plan_of
from ._messages import NAME
from ._partial import takes_time
from ._pool import Background, Pool


def separable(problem: Problem, chain: Chain) -> bool:
    """Whether the latency optimum is the chain DP of the modules' optima: the chain bounds the optimum
    (:func:`chain_bounds`) and no constant takes time (one that does may run earlier in the optimum than in
    its consumers' module)."""
    return chain_bounds(problem, chain) and not any(takes_time(problem, c) for c in chain.constants)


def chain_bounds(problem: Problem, chain: Chain) -> bool:
    """Whether the DP on the module solves' bounds bounds the optimum: the latency objective, every cut a
    series point, no memory limit that can bind, no co-location coupling modules, and every constant (a
    task no graph input reaches, e.g. a weight transpose) in its consumers' module, where the bound solves
    leave it out (:func:`step`)."""
    if (problem.objective.kind != "latency" or chain.multi_channel_cuts or problem.colocation_groups
            or JobGraph.whole(problem).memory_limits()):
        return False
    module_of = chain.module_of
    return all(module_of[v] == module_of[c] for c in chain.constants for v in problem.graph.successors[c])


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0, workers: int | None = None,
          module_size: int = 20, module_time_limit: float = 0.5, progress=None) -> Plan:
    """MILP-SPLIT: modules of at most ``module_size`` tasks (a group between series points up to twice that
    stays whole: its cuts are exact), each solve given at most ``module_time_limit`` seconds of work
    (CP-SAT's deterministic time, :data:`.cpsat.WORK_PER_SECOND`: the plan does not depend on the machine's
    load; ``time_limit`` is on the clock)."""
    whole_size = 2 * module_size
    return solve_chain(problem, detect(problem.graph, module_size, whole_size=whole_size), time_limit=time_limit,
                       seed=seed, workers=workers, module_time_limit=module_time_limit, progress=progress,
                       size_note=f"at most {module_size} tasks, whole series groups up to {whole_size}; ")


def solve_chain(problem: Problem, chain: Chain, *, time_limit: float, seed: int = 0, workers: int | None = None,
                module_time_limit: float, progress=None, label: str = NAME, size_note: str = "") -> Plan:
    """Solve each module of ``chain`` for every (state, exit) pair and join them; the best plan of the join
    and the baselines, proven optimal when the chain is :func:`separable` and every module solve is."""
    watch = Stopwatch(time_limit)
    workers = workers or max(os.cpu_count() or 1, 1)
    background = Background(problem, watch, workers)
    splits = promising_splits(problem)
    if progress:
        progress(f"{label}: {len(chain.modules)} modules ({size_note}{len(chain.series_points)} "
                 f"series points, {chain.multi_channel_cuts} multi-channel cuts, widest {chain.widest_cut} "
                 f"tensors), {workers} worker(s)")
    memory_binds = bool(JobGraph.whole(problem).memory_limits())
    # with series cuts only, the DP run on the module solves' bounds (constants left out) bounds the optimum
    bounds = chain_bounds(problem, chain)
    exact_chain = separable(problem, chain)
    chain_bound, proven = None, False
    pool = Pool(problem, workers)
    baseline = best = None
    stats, notes = {}, []
    solves = optimal = heft_only = passes = dominated = cut_off = late = guided = twins = 0
    try:
        for i, sizes in enumerate(splits):
            share = Stopwatch(watch.left / (len(splits) - i))
            scale = 1.0
            while True:
                res = join(problem, chain, sizes, pool, share, memory_binds=memory_binds,
                            module_time_limit=module_time_limit, seed=seed, progress=progress, scale=scale,
                            bounds=bounds,
                            label=label + (f" [{len(sizes)} sub-batches]" if len(splits) > 1 else ""))
                passes += 1
                solves, optimal = solves + res.solves, optimal + res.optimal_solves
                heft_only += res.heft_solves
                dominated += res.dominated
                cut_off += res.cut_off
                late += res.late
                guided += res.guided
                twins += res.twins
                if passes == 1:  # the baseline is due: the join's plan is compared with it and needs its bound
                    baseline = best = background.result()
                plan = plan_of(problem, sizes, res, bounds, watch, notes)
                if plan is not None and bounds:
                    chain_bound = max(chain_bound or 0.0, res.lower)
                    proven = proven or (exact_chain and res.optimal_solves == res.solves)
                if plan is not None and (best is None or plan.objective < best.objective):
                    best = plan
                    stats["join_makespan"] = res.partial.makespan
                    notes = [n for n in notes if not n.startswith(("batch split", "memory repaired"))]
                    if res.repaired:
                        notes.append("memory repaired: a module fitted no state's budget, tasks were moved after")
                    if len(sizes) > 1:
                        notes.append(f"batch split into {len(sizes)} sub-batches "
                                     f"({'/'.join(map(str, sizes))} samples)")
                # a chain of series cuts with unfinished module solves is walked again with 4x their time
                # (a tighter bound, maybe a better plan); proven answers are reused, so the time goes to the rest
                if (proven or plan is None or not bounds or not res.share_bound
                        or share.left < 0.05 * share.limit):
                    break
                scale *= 4
    finally:
        pool.close()
        background.close()
    if best is None and watch.left > 0.1 and label == NAME:
        # the modules' memory budgets are a heuristic cut of the devices' memory: the whole model may still fit
        from .. import exact
        try:
            whole = exact.solve(problem, time_limit=watch.left, seed=seed, workers=workers, decompose=False)
        except InfeasibleError:
            whole = None
        if whole is not None:
            return replace(whole, notes=whole.notes + (
                f"{NAME}: neither the join nor a baseline fitted the memory; this is the whole-graph CP-SAT plan",))
    if best is None:
        raise InfeasibleError(f"{label} found no plan within the memory limits and no baseline fits: raise the "
                              "memory limit or the module size")
    if best.solver != NAME:
        notes.append(f"kept the baseline plan ({best.solver}): the join found nothing better")
    if chain_bound is not None:
        stats["chain_bound"] = chain_bound
        freed = " (solved again without their constants, which may run earlier)" if twins else ""
        notes.append("every cut is a series point: the bound is the join's dynamic program on the module bounds"
                     + freed)
    bound, source = better_bound((best.bound, best.bound_source), (min(chain_bound or 0.0, best.objective), MODULE_DP))
    walks = f" in {passes} passes" if passes > len(splits) else ""
    notes.insert(0, f"{len(chain.modules)} modules ({len(chain.series_points)} series points, "
                    f"{chain.multi_channel_cuts} multi-channel cuts, widest {chain.widest_cut} tensors); "
                    f"{solves} module solves{walks} ({pool.reused} answered without solving, {cut_off} ended by their "
                    f"cutoff ({late} by their jobs' deadlines), {guided} started from an earlier module's "
                    f"schedule), {optimal} proven, {heft_only} unsolved (first schedule kept); {dominated} dominated "
                    "states dropped")
    stats.update({"modules": float(len(chain.modules)), "module_solves": float(solves),
                  "module_solves_reused": float(pool.reused),
                  "module_solves_optimal": float(optimal), "module_solves_heft": float(heft_only),
                  "dominated_states": float(dominated), "module_solves_cut_off": float(cut_off),
                  "module_solves_late": float(late),
                  "module_solves_guided": float(guided),
                  "widest_cut": float(chain.widest_cut)})
    if baseline is not None:
        stats["baseline_objective"] = baseline.objective
    # as for exact: "optimal" when the integer models are proven optimal (here every module's, on a chain)
    unfinished = heft_only or optimal < solves
    status = "optimal" if (proven and best.solver == NAME) or best.objective <= bound * (1 + 1e-9) else (
        "timeout" if (bounds and unfinished) or heft_only or watch.expired else "feasible")
    return replace(best, solver=NAME, status=status, bound=bound, bound_source=source, solve_time_s=watch.elapsed,
                   notes=tuple(notes), stats={**best.stats, **stats})
