"""The driver: every promising batch split joined (again with more time where the chain bounds), the best plan
of the join and the baselines, with its bound and counts."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace

from ...bounds import MODULE_DP
from ...errors import InfeasibleError
from ...plan import Plan
from ...problem import Problem, whole_tasks
from .. import ROUNDING_GAP, meets_its_bound
from ..baselines import parts_polish
from ..engines.jobs import JobGraph
from ..engines.modules import Chain, detect
from ..engines.plans import MAKE_PLAN_S_PER_TASK, Stopwatch, better_bound
from ..search import promising_splits, whole_batch_notes, whole_task_note
from ._join import Counts, JoinResult, join, plan_of
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
    load; ``time_limit`` is on the clock).

    Where the plan is not proven, its chain had cuts that are not series points (a group between series points
    larger than twice the module size, cut inside), larger modules would cut at series points only (so that the
    join's DP bounds the optimum, :func:`chain_bounds`) and over half the time is left, the chain of the least
    such size is solved in the time left, and the better plan and bound kept (gpt2-small on paper-server: gap
    5.3% in 2 s with modules of 20 tasks; proven optimal with 40, in 22 s)."""
    watch = Stopwatch(time_limit)
    chain = detect(problem.graph, module_size, whole_size=2 * module_size)
    plan = solve_chain(problem, chain, time_limit=time_limit, seed=seed, workers=workers,
                       module_time_limit=module_time_limit, progress=progress,
                       size_note=f"at most {module_size} tasks, whole series groups up to {2 * module_size}; ")
    if plan.status == "optimal" or not chain.multi_channel_cuts or watch.left < 0.5 * time_limit:
        return plan
    larger = _series_chain(problem, module_size)
    if larger is None:
        return plan
    size, chain = larger
    again = solve_chain(problem, chain, time_limit=watch.left, seed=seed, workers=workers,
                        module_time_limit=module_time_limit, progress=progress,
                        size_note=f"at most {size} tasks, whole series groups up to {2 * size}; ")
    return replace(_better(plan, again, size), solve_time_s=watch.elapsed)


def _series_chain(problem: Problem, module_size: int) -> tuple[int, Chain] | None:
    """The least module size above ``module_size`` (doubling) whose chain cuts at series points only and
    bounds the optimum, with that chain; None where none does."""
    size = 2 * module_size
    while size < len(problem.graph):
        chain = detect(problem.graph, size, whole_size=2 * size)
        if not chain.multi_channel_cuts:
            return (size, chain) if chain_bounds(problem, chain) else None
        size *= 2
    return None


def _better(first: Plan, again: Plan, size: int) -> Plan:
    """The better plan of two solves of one problem, with the better of their bounds and the status that
    follows from them."""
    plan = again if again.objective < first.objective else first
    bound, source = better_bound((first.bound, first.bound_source), (again.bound, again.bound_source))
    bound = min(bound, plan.objective)
    status = "optimal" if plan.objective <= bound * (1 + 1e-9) else again.status
    note = (f"solved again with modules of up to {size} tasks: " + ("this plan" if plan is again else
            "the first plan kept") + f", bound {bound:.6g} ({source})")
    return replace(plan, bound=bound, bound_source=source, status=status, notes=(*plan.notes, note))


@dataclass
class _Walks:
    """What the driver keeps across the walks of every batch split: the best plan (the baseline's until the
    join beats it), the DP bound on a chain of series cuts, whether it is proven, counts, notes and stats."""
    best: Plan | None = None
    baseline: Plan | None = None
    chain_bound: float | None = None
    proven: bool = False
    out_of_time: bool = False  # a join stopped at its deadline before the last module
    counts: Counts = field(default_factory=Counts)
    passes: int = 0
    whole: tuple[float, bool] | None = None  # batch: the whole batch's DP bound (every task whole), and if it is met
    notes: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def solve_chain(problem: Problem, chain: Chain, *, time_limit: float, seed: int = 0, workers: int | None = None,
                module_time_limit: float, progress=None, label: str = NAME, size_note: str = "") -> Plan:
    """Solve each module of ``chain`` for every (state, exit) pair and join them; the best plan of the join
    and the baselines, proven optimal when the chain is :func:`separable` and every module solve is."""
    watch = Stopwatch(time_limit)
    polish_seconds = parts_polish.prepare(problem, time_limit)
    # the joins and the baselines end early enough for their plans to be made (simulated and validated) and
    # compared within the limit (GPT-3 over six-servers at 20 s: the baselines given it all ended at 20.9 s),
    # and (batch) the parts polish to have its share
    search = Stopwatch(max(time_limit - MAKE_PLAN_S_PER_TASK * len(problem.graph) - polish_seconds, 0.0))
    workers = workers or max(os.cpu_count() or 1, 1)
    background = Background(problem, search, workers)
    splits = promising_splits(problem, search)
    if progress:
        progress(f"{label}: {len(chain.modules)} modules ({size_note}{len(chain.series_points)} "
                 f"series points, {chain.multi_channel_cuts} multi-channel cuts, widest {chain.widest_cut} "
                 f"tensors), {workers} worker(s)")
    # with series cuts only, the DP run on the module solves' bounds (constants left out) bounds the optimum
    bounds = chain_bounds(problem, chain)
    # batch: the whole batch at once is the latency problem of whole tasks, whose DP on bounds may hold
    whole_bounds = (problem.objective.kind == "batch" and not chain.multi_channel_cuts
                    and chain_bounds(whole_tasks(problem), chain))
    walks = _Walks()
    pool = Pool(problem, workers)
    try:
        for i, sizes in enumerate(splits):
            if meets_its_bound(walks.best):  # no split can better a proven plan
                break
            _walk(problem, chain, sizes, pool, Stopwatch(search.left / (len(splits) - i)), watch, walks, background,
                  bounds=bounds, whole_bounds=whole_bounds and len(sizes) == 1,
                  module_time_limit=module_time_limit, seed=seed, progress=progress,
                  label=label + (f" [{len(sizes)} sub-batches]" if len(splits) > 1 else ""))
    finally:
        pool.close()
        background.close()
    # the join fitted nothing in the memory (not: ran out of time, where the rest is for making the plan)
    if "join_makespan" not in walks.stats and not walks.out_of_time and watch.left > 0.1 and label == NAME:
        whole = _whole_graph(problem, watch, seed, workers)
        if whole is not None and (walks.best is None or whole.objective < walks.best.objective):
            return whole
    if walks.best is None and (walks.out_of_time or watch.expired):
        raise InfeasibleError(f"{label} found no plan within the memory limits in {time_limit:g} s, and its "
                              "baselines none: raise the time limit")
    if walks.best is None:
        raise InfeasibleError(f"{label} found no plan within the memory limits and no baseline fits: raise the "
                              "memory limit or the module size")
    if problem.objective.kind == "batch" and not meets_its_bound(walks.best):  # in the time the joins left
        walks.best = parts_polish.improve(problem, walks.best, Stopwatch(max(
            watch.left - MAKE_PLAN_S_PER_TASK * len(problem.graph), 0.0)), seed=seed,
            seconds=polish_seconds, others=(walks.baseline,))
    return _finish(problem, chain, walks, len(splits), pool.reused, bounds, watch)


def _walk(problem: Problem, chain: Chain, sizes: tuple[int, ...], pool: Pool, share: Stopwatch, watch: Stopwatch,
          walks: _Walks, background: Background, *, bounds: bool, module_time_limit: float, seed: int, progress,
          label: str, whole_bounds: bool = False) -> None:
    """Join the chain for one batch split, keeping the better plan in ``walks``; on a chain of series cuts with
    unfinished module solves, walk again with 4x their time, and 4x the cap on one solve's time where that is
    what stopped them (a tighter bound, maybe a better plan; proven answers are reused, so the time goes to
    the rest) while the split's share of the time lasts. ``whole_bounds`` (a batch's whole split, every task
    whole): the DP on the module bounds bounds the plans that run every task whole, kept in ``walks.whole``."""
    memory_binds = bool(JobGraph.whole(problem).memory_limits())
    exact_chain = separable(problem, chain)
    scale, cap = 1.0, module_time_limit
    while True:
        res = join(problem, chain, sizes, pool, share, memory_binds=memory_binds, module_time_limit=cap,
                   seed=seed, progress=progress, scale=scale, bounds=bounds or whole_bounds, label=label)
        walks.passes += 1
        walks.counts += res.counts
        walks.out_of_time = walks.out_of_time or res.out_of_time is not None
        if walks.passes == 1:  # the baseline is due: the join's plan is compared with it and needs its bound
            walks.baseline = walks.best = background.result()
        plan = plan_of(problem, sizes, res, bounds, watch, walks.notes)
        if plan is not None and whole_bounds and not res.repaired and res.lower > 0:
            walks.whole = (res.lower, res.partial.makespan <= res.lower * (1 + ROUNDING_GAP))
        if plan is not None and bounds:
            walks.chain_bound = max(walks.chain_bound or 0.0, res.lower)
            walks.proven = walks.proven or (exact_chain and res.counts.optimal == res.counts.solves)
        if plan is not None:  # what the join itself found, kept or not (a baseline may be as good)
            walks.stats["join_makespan"] = min(walks.stats.get("join_makespan", math.inf), res.partial.makespan)
        if plan is not None and (walks.best is None or plan.objective < walks.best.objective):
            _keep(walks, plan, res, sizes)
        unproven = res.counts.optimal < res.counts.solves
        if (walks.proven or plan is None or not bounds or not unproven or share.left < 0.05 * share.limit
                or meets_its_bound(walks.best)):  # proven: walking again cannot better it
            return
        scale *= 4
        if not res.share_bound:  # the solves left open ran into the cap on one solve, not the step's share
            cap *= 4


def _keep(walks: _Walks, plan: Plan, res: JoinResult, sizes: tuple[int, ...]) -> None:
    """The join's ``plan`` is the best so far: keep it, with the notes that describe it."""
    walks.best = plan
    walks.notes[:] = [n for n in walks.notes if not n.startswith(("batch split", "memory repaired"))]
    if res.repaired:
        walks.notes.append("memory repaired: a module fitted no state's budget, tasks were moved after")
    if len(sizes) > 1:
        walks.notes.append(f"batch split into {len(sizes)} sub-batches ({'/'.join(map(str, sizes))} samples)")


def _whole_graph(problem: Problem, watch: Stopwatch, seed: int, workers: int) -> Plan | None:
    """The whole-graph CP-SAT plan where the join fitted no plan in the memory: the modules' memory budgets are a
    heuristic cut of the devices' memory, and the whole model may still fit (exact starts from the best
    baseline, which where memory is that tight may be a first schedule far from the optimum)."""
    from .. import exact
    try:
        whole = exact.solve(problem, time_limit=watch.left, seed=seed, workers=workers, decompose=False)
    except InfeasibleError:
        return None
    return replace(whole, notes=whole.notes + (
        f"{NAME}: the join fitted no plan in the memory; this is the whole-graph CP-SAT plan",))


def _finish(problem: Problem, chain: Chain, walks: _Walks, splits: int, reused: int, bounds: bool,
            watch: Stopwatch) -> Plan:
    """The best plan as split's, with the best bound, its status, and notes and stats that say what the join
    did."""
    best, counts, notes, stats = walks.best, walks.counts, walks.notes, walks.stats
    if best.solver != NAME:
        notes.append(f"kept the baseline plan ({best.solver}): the join found nothing better")
    if walks.chain_bound is not None:
        stats["chain_bound"] = walks.chain_bound
        freed = " (solved again without their constants, which may run earlier)" if counts.twins else ""
        notes.append("every cut is a series point: the bound is the join's dynamic program on the module bounds"
                     + freed)
    bound, source = better_bound((best.bound, best.bound_source),
                                 (min(walks.chain_bound or 0.0, best.objective), MODULE_DP))
    passes = f" in {walks.passes} passes" if walks.passes > splits else ""
    notes.insert(0, f"{len(chain.modules)} modules ({len(chain.series_points)} series points, "
                    f"{chain.multi_channel_cuts} multi-channel cuts, widest {chain.widest_cut} tensors); "
                    f"{counts.solves} module solves{passes} ({reused} answered without solving, {counts.cut_off} "
                    f"ended by their cutoff ({counts.late} by their jobs' deadlines), {counts.guided} started from an "
                    f"earlier module's schedule), {counts.optimal} proven, {counts.heft} unsolved (first schedule "
                    f"kept); {counts.dominated} dominated states dropped")
    stats.update({"modules": float(len(chain.modules)), **counts.stats(), "module_solves_reused": float(reused),
                  "widest_cut": float(chain.widest_cut)})
    if walks.baseline is not None:
        stats["baseline_objective"] = walks.baseline.objective
    # as for exact: "optimal" when the integer models are proven optimal (here every module's, on a chain)
    unfinished = counts.heft or counts.optimal < counts.solves
    status = "optimal" if (walks.proven and best.solver == NAME) or best.objective <= bound * (1 + 1e-9) else (
        "timeout" if (bounds and unfinished) or counts.heft or watch.expired else "feasible")
    if walks.whole is not None and status != "optimal":
        stats["whole_task_bound"] = walks.whole[0]
        notes.append(whole_task_note(best, *walks.whole, bound))
    notes += whole_batch_notes(problem)
    return replace(best, solver=NAME, status=status, bound=bound, bound_source=source, solve_time_s=watch.elapsed,
                   notes=tuple(notes), stats={**best.stats, **stats})
