"""The frame shared by the exact engines (CP-SAT, MILP): baseline first, then the engine, never worse.

For latency the engine solves the one-copy job graph; for the batch objective it solves the batch split
into sub-batches shared by all tasks (near-equal and speed-proportional, see :func:`.jobs.batch_splits`),
the promising ones (each with its share of the time, see :func:`promising_splits`). The plan returned is the
best of the engine's and the baseline's (HEFT, best single device, unequal data parallelism; where memory leaves
those no room, greedy's fill, the memory-proportional split or CP-SAT's first schedule), with the best bound;
a batch plan is then polished part by part (:mod:`.baselines.parts_polish`, in a share of the time kept for it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace

from ..bounds import lower_bound, lower_bound_source, serial_upper_bound
from ..errors import InfeasibleError, InputError
from ..plan import Plan, format_gap
from ..problem import Problem
from . import ROUNDING_GAP
from .baselines import best_device, data_parallel, greedy, heft, list_search, memory_split, parts_polish, window_polish
from .baselines.priced_segments import priced_segments_plan
from .baselines.streamed import streamed_plan
from .engines.cpsat import solve_jobs
from .engines.jobs import JobGraph, batch_splits
from .engines.modules import detect, piece_sizes
from .engines.outcome import Engine, Outcome
from .engines.plans import VALIDATE_S_PER_PART, Stopwatch, best_of, better_bound, plan_from_jobs
from .engines.symmetry import CRITERIA, relabel
from .pattern_layers import pattern_layer_plan
from .pipeline.layers import split_layers
from .server_layers import server_layer_plan

BASELINE_S_PER_TASK = 1e-4  # HEFT, its simulation and validation, per task (50,000 tasks: about 5 s)
HEFT_S_PER_TASK_DEVICE = 2e-5  # HEFT alone, per task and device (GPT-3's 5,286 tasks over 26 devices: 1.4-2.3 s)
BEST_DEVICE_S_PER_TASK = 2e-4  # the best single device's plan, per task (GPT-3's 5,286 over 26 devices: 0.8 s)


# of the time left after the baselines, for improving the best latency plan by list search (its work is set by this
# share of the limit, and it stops earlier where kicks stop finding better plans): on random DAGs of 40-64 tasks,
# exact at 30 s proved the same gaps with it as without (2.5-3.1%), and on randomly wired networks of 483-927
# tasks, where CP-SAT on the whole graph and split's join do not leave the first plan, it is what improves on
# HEFT (benchmarks/results/list_search.md, split_randwire.md)
LIST_SEARCH_SHARE = 0.25
# of the time left, what the window polish of the best latency baseline may take: it stops by itself once no
# change helps (a layered DAG of hundreds of tasks: well under a second), so only a large model waits on it, where
# the engine after it gets nowhere either (GPT-3's prefill in split's worker beside the module solves: a quarter
# cut it short at 24.64 s, where it ends at 24.59 s in 3.5-4.5 s)
POLISH_SHARE = 0.5
# tasks: list search only where a piece of the graph between series points is larger than this, the size beyond
# which exact only minimises (exact.PROBES_UP_TO): smaller pieces CP-SAT solves better, and split's join waits
# for the baseline (layered DAGs of 120 and 320 tasks, pieces of 20: split proved them optimal in 0.8 s, and in
# 4.5 s with list search in its baseline; randomly wired networks' pieces: 241-369 tasks; GPT-3's: 46)
LIST_SEARCH_FROM = 100
# seconds CP-SAT's first schedule may take past the time, where no baseline fits the memory: without it the
# solver has no plan (found by fuzzing: milp at 0.3 s refused a 40-task problem exact placed in that time)
FIRST_SCHEDULE_S = 0.5


def baseline_plan(problem: Problem, watch: Stopwatch, bound_share: float = 0.25) -> Plan | None:
    """The best of HEFT, the best single device, (latency) the best runs of whole layers, the memory
    segments bound's placements spliced (:mod:`.baselines.priced_segments`) and its layer patterns scheduled
    exactly and packed (:mod:`.pattern_layers`), and (batch objective)
    data parallelism with unequal shares and the batch streamed through a pipeline's placement
    (:mod:`.baselines.streamed`); where none fits the memory, :func:`packed_plan`, or None; a latency plan
    then polished window by window between series points (:mod:`.baselines.window_polish`, in
    :data:`POLISH_SHARE` of the time left) and improved by list search (:mod:`.baselines.list_search`) in :data:`LIST_SEARCH_SHARE` of the time left where a piece between series
    points has more than :data:`LIST_SEARCH_FROM` tasks. The problem's lower bound is
    computed first, with ``bound_share`` of the
    time left: each plan asks for it, and the first to ask would otherwise give its LPs all the time there is
    (a caller running this beside other work, in a process of its own, can give it more: see
    :func:`bound_share_beside`)."""
    lower_bound(problem, watch.left * bound_share)
    attempts = []
    if problem.objective.kind == "latency":
        # where memory binds: the memory segments bound's placements spliced over the model, devices by HEFT;
        # first, as it is the best plan there (GPT-3's prefill over six-servers: 24.98 s, server layers' 27.8 s,
        # which took the time before it and left it one of the bound's mixes, 25.44 s, in split's worker)
        # then its layer patterns scheduled exactly and packed, the priced plan's other tasks kept (GPT-3 FP32 over
        # six-servers: 23.81 s, the priced plan's 24.81 s)
        attempts.append(lambda: _priced_and_patterns(problem, watch))
        # a model of layers over servers, each layer over a server's devices (GPT-3 BF16 over six servers:
        # 1.361 s, priced segments' 1.380 s)
        attempts.append(lambda: server_layer_plan(problem, Stopwatch(max(watch.left / 2, 1e-3))))
    # each of these takes longer than HEFT (the first runs it): where its share is shorter, HEFT alone is the
    # better use of the time (GPT-3 over six-servers at 7 s: 9.1-11.2 s with them run, 7.5 s without)
    found = best_of([_unless_expired(watch, a) for a in attempts] if watch.left / 3 > _heft_seconds(problem) else [])
    attempts = [lambda: found]
    heft_seconds: list[float] = []
    if found is None or watch.left > _heft_seconds(problem):
        # HEFT, the plan every solver answers with at least: where there is none yet, even past the limit, else
        # where it has the time (GPT-3 over six-servers at 7 s: 1.4-2.3 s past it, on top of a plan already there)
        attempts.append(_timed(heft_seconds, lambda: heft.solve(problem, time_limit=max(watch.left, 1e-3))))
    if problem.objective.kind == "batch" and best_device.candidates(problem):
        attempts.append(_if_time_for(watch, heft_seconds, lambda: data_parallel.solve(
            problem, time_limit=max(watch.left / 10, 1e-3))))
    if problem.objective.kind == "batch":  # a model spread over devices for its memory: the batch pipelined
        attempts.append(_if_time_for(watch, heft_seconds, lambda: streamed_plan(
            problem, Stopwatch(max(watch.left / 2, 1e-3)))))
    if problem.objective.kind == "latency":  # a model of layers: whole layers in runs, fastest devices first
        attempts.append(_unless_expired(watch, lambda: split_layers(problem, Stopwatch(max(watch.left / 10, 1e-3)))))
    if best_device.candidates(problem):
        attempts.append(_if_time_for(watch, heft_seconds, lambda: best_device.solve(
            problem, time_limit=max(watch.left, 1e-3))))
    best = best_of(attempts)
    if best is None:  # memory too tight for HEFT's choices
        best = packed_plan(problem, watch)
    if best is not None and problem.objective.kind == "latency" and not watch.expired:
        best = window_polish.polish(problem, best, Stopwatch(watch.left * POLISH_SHARE))
    if best is not None and problem.objective.kind == "latency" and not watch.expired and max(
            piece_sizes(detect(problem.graph, 1, cut_large=False)), default=0) > LIST_SEARCH_FROM:
        best = list_search.improve(problem, best, Stopwatch(watch.left * LIST_SEARCH_SHARE),
                                   seconds=watch.limit * LIST_SEARCH_SHARE)  # its work: by the limit, not the clock
    return best


def _priced_and_patterns(problem: Problem, watch: Stopwatch) -> Plan | None:
    """The memory segments bound's placements spliced (in a third of the time left), and the better of that plan
    and its layer patterns scheduled exactly and packed (in half the time then left)."""
    priced = priced_segments_plan(problem, Stopwatch(max(watch.left / 3, 1e-3)))
    if priced is None or watch.expired:
        return priced
    return best_of([lambda: priced, lambda: pattern_layer_plan(problem, priced, Stopwatch(watch.left / 2))])


def _heft_seconds(problem: Problem) -> float:
    """About how long HEFT takes on ``problem`` (:data:`HEFT_S_PER_TASK_DEVICE`)."""
    return HEFT_S_PER_TASK_DEVICE * len(problem.graph) * len(problem.platform.devices)


def _unless_expired(watch: Stopwatch, attempt: Callable[[], Plan | None]) -> Callable[[], Plan | None]:
    """``attempt``, skipped (None) once ``watch`` has expired: a baseline takes seconds on thousands of tasks,
    and past the limit it only delays the answer (a random DAG of 3,000 tasks over six-servers at 3 s ended at
    7.7 s). HEFT is not wrapped: it is the plan every solver answers with at least."""
    return lambda: None if watch.expired else attempt()


def _timed(seconds: list[float], attempt: Callable[[], Plan | None]) -> Callable[[], Plan | None]:
    """``attempt``, its run's seconds appended to ``seconds``."""
    def run() -> Plan | None:
        began = time.perf_counter()
        try:
            return attempt()
        finally:
            seconds.append(time.perf_counter() - began)
    return run


def _if_time_for(watch: Stopwatch, heft_seconds: list[float],
                 attempt: Callable[[], Plan | None]) -> Callable[[], Plan | None]:
    """``attempt``, skipped (None) where less time is left on ``watch`` than HEFT took: a batch baseline costs at
    least a simulation and a validation of as many parts as HEFT's plan, whatever its share of the time (a random
    DAG of 3,000 tasks over six-servers, batch 4, at 3 s: data parallelism took 0.8-1.2 s of a 0.2 s share, the
    streamed plan 0.8-1.0 s, and the answer came at 3.3-3.5 s with HEFT run last)."""
    return lambda: None if watch.left <= max(heft_seconds, default=0.0) else attempt()


def packed_plan(problem: Problem, watch: Stopwatch) -> Plan | None:
    """Where memory is too tight for the baselines above: the best of greedy's fill, the memory-proportional
    split and, where neither fits, CP-SAT's first schedule of one part per task (a search that packs memory
    exactly), in a quarter of the time left and :data:`FIRST_SCHEDULE_S` at least; None where none is found.
    Found by fuzzing: on graphs of 30-40 tasks with devices of 100-400 MB, milp (HiGHS) found no schedule in
    2 s where CP-SAT's first took milliseconds."""
    best = best_of([lambda: greedy.solve(problem, time_limit=max(watch.left / 10, 1e-3)),
                    lambda: memory_split.solve(problem, time_limit=max(watch.left / 10, 1e-3))])
    if best is not None:
        return best
    jobs = JobGraph.whole(problem)
    out = solve_jobs(jobs, upper=serial_upper_bound(problem), time_limit=max(watch.left / 4, FIRST_SCHEDULE_S),
                     workers=1, first_only=True)
    if out.device_of is None:
        return None
    return plan_from_jobs(jobs, out.device_of, out.start, solver="CP-SAT first schedule", status="feasible",
                          watch=watch)


def bound_share_beside(problem: Problem, time_limit: float) -> float:
    """The share of ``time_limit`` the lower bound may take in a process of its own beside the main solve: all
    but what the baselines will need after it (:data:`BASELINE_S_PER_TASK`) and a second, at least a quarter."""
    if time_limit <= 0:
        return 0.25
    return max(0.25, 1.0 - (BASELINE_S_PER_TASK * len(problem.graph) + 1.0) / time_limit)


def start_hint(jobs: JobGraph, symmetry: str, plan: Plan | None = None):
    """A first schedule for an engine, (device, start) per job, relabelled to respect the symmetry order:
    ``plan``'s where it is one part per task on a graph of one part per task (a latency plan: the best
    baseline, list search's), else HEFT's; None if HEFT fails."""
    if plan is not None and jobs.sizes == (jobs.problem.batch_size,) and len(plan.assignments) == len(jobs.jobs):
        device_of = {(a.task, 0): a.device for a in plan.assignments}
        start = {(a.task, 0): a.start or 0.0 for a in plan.assignments}
    else:
        try:
            device_of, start, _ = heft.heft_schedule(jobs)
        except InfeasibleError:
            return None
    return relabel(device_of, jobs.problem, symmetry, lambda j, d: jobs.duration(j, d)), start


SPLIT_SLACK = 1.5  # a split whose HEFT makespan is this far above the best split's is not searched
SPLITS_SHARE = 0.1  # of the time left, what the HEFT runs that pick the splits may take


def promising_splits(problem: Problem, watch: Stopwatch | None = None) -> list[tuple[int, ...]]:
    """The batch splits worth searching, best HEFT makespan first: those within ``SPLIT_SLACK`` of the best.

    Searching every split gives each a fraction of the time; where splitting the batch multiplies the work
    (launch-bound costs: randomly wired networks measured 1.6-2.3x worse at L = 2, 3 under HEFT) that
    fraction is wasted, and split's join had too little time for L = 1 (it kept HEFT's plan). The largest
    gain over HEFT on the same split measured was about a third (mobilenet_v3_large, batch 8), so a split
    this far behind is unlikely to win; it is a heuristic cut, the bound does not depend on it. The HEFT runs
    take at most :data:`SPLITS_SHARE` of the time ``watch`` has left: one whose jobs would take longer, at the
    rate per job of those before it (the first: at :data:`BASELINE_S_PER_TASK`), is not started, and the splits
    it would have tried are left out (the whole batch first: its HEFT is the cheapest; GPT-3 at a batch of 32
    over six-servers tried 50 splits of up to 26 sub-batches for the whole 30 s of its solve; a random DAG of
    3,000 tasks at 3 s ranked the whole batch alone for 0.8 s past the time left)."""
    splits = batch_splits(problem)
    if len(splits) == 1:
        return splits
    if watch is not None and watch.expired:  # no time to search any split: the whole batch, as the baselines
        return splits[:1]
    share = None if watch is None else Stopwatch(watch.left * SPLITS_SHARE)
    value: dict[tuple[int, ...], float] = {}
    rate = 0.0  # seconds per job of the HEFT runs so far
    for sizes in splits:
        jobs = JobGraph(problem, sizes)
        if share is not None and (rate if value else BASELINE_S_PER_TASK) * len(jobs.jobs) > share.left:
            if not value:  # the whole batch alone would be ranked: no ranking gives that too
                return splits[:1]
            break
        began = time.perf_counter()
        try:
            value[sizes] = heft.heft_schedule(jobs)[2]
        except InfeasibleError:
            value[sizes] = math.inf
        rate = max(rate, (time.perf_counter() - began) / max(len(jobs.jobs), 1))
    best = min(value.values())
    if not math.isfinite(best):
        return splits
    return sorted((s for s in value if value[s] <= SPLIT_SLACK * best), key=value.get)


def exact_search(problem: Problem, name: str, engine: Engine, *, time_limit: float, symmetry: str, seed: int = 0,
                 progress=None, engine_bound: str = "model") -> Plan:
    """The engine on each batch split in turn (latency: the one split), from the best baseline's plan; the best
    plan found; ``engine_bound`` names the engine's own bound where it is the best (``bound_source``).
    ``progress`` hears, on the run's own clock, each split as it starts and ends, and the result."""
    if symmetry not in CRITERIA:
        raise InputError(f"unknown symmetry criterion {symmetry!r}: choose {', '.join(CRITERIA)}")
    watch = Stopwatch(time_limit)
    baseline = baseline_plan(problem, watch)
    latency = problem.objective.kind == "latency"
    splits = promising_splits(problem, watch)
    upper = baseline.objective if baseline else serial_upper_bound(problem)
    best, improved, bound = baseline, False, lower_bound(problem, watch.left / 4)
    source = lower_bound_source(problem)
    statuses, notes, stats = [], whole_batch_notes(problem), _baseline_stats(baseline)
    whole: tuple[float, bool] | None = None  # batch: the whole-batch model's bound, and whether it is its optimum
    reserve = parts_polish.prepare(problem, time_limit)  # the parts polish's, after the engine
    for i, sizes in enumerate(splits):
        jobs = JobGraph(problem, sizes)
        if progress and len(splits) > 1:
            progress(f"  {name}: batch split {i + 1}/{len(splits)} ({'/'.join(map(str, sizes))} samples) at "
                     f"{watch.elapsed:.1f} s, best so far {best.objective if best else float('inf'):.6g}")
        # kept back: the time to make its answer a plan, simulated and validated, and (batch) to polish the best
        budget = (watch.left - reserve) / (len(splits) - i) - VALIDATE_S_PER_PART * len(jobs.jobs)
        if budget <= 0:  # the baselines took the time: a model of thousands of jobs would overrun the limit
            statuses.append("timeout")
            notes.append(f"{name} was not started on {len(jobs.jobs):,} jobs: the baselines and bounds took the "
                         "time; a longer --time-limit gives it some")
            break
        out = engine(jobs, upper, budget, best)
        statuses.append(out.status)
        whole = _whole_task_bound(out, upper, problem) if not latency and len(sizes) == 1 else whole
        extra = dict(out.stats or {})
        if latency:
            bound, source = better_bound((bound, source), (out.bound, extra.pop("bound_source", engine_bound)))
        if "note" in extra:
            notes.append(extra.pop("note"))
        stats.update(extra)
        plan = _plan_of(jobs, out, name, watch, stats)
        if plan is not None and (best is None or plan.objective < best.objective):
            best, improved, notes = plan, True, _with_split_note(notes, sizes)
    status = _engine_status(latency, statuses, splits, notes)
    if best is None:
        raise InfeasibleError(f"{name} found no plan within {time_limit:g} s and no baseline fits the memory: "
                              "raise the time limit or the memory")
    if not improved:
        notes.append(f"kept the baseline plan ({baseline.solver}): the engine found nothing better")
    best, notes = parts_polish.after_engine(problem, best, notes, bound, watch, seed, reserve, progress, baseline)
    stats.update(_speedup(problem, best, watch))
    if best.objective <= bound * (1 + 1e-9):
        status = "optimal"
    bound, source = better_bound((bound, source), (best.bound, best.bound_source))
    bound = min(bound, best.objective)
    if whole is not None and status != "optimal":
        stats["whole_task_bound"] = whole[0]
        notes.append(whole_task_note(best, *whole, bound))
    if progress:
        progress(f"  {name}: best {best.objective:.6g}, bound {bound:.6g} ({source}) at {watch.elapsed:.1f} s")
    return replace(best, solver=name, status=status, bound=bound, bound_source=source,
                   solve_time_s=watch.elapsed, notes=tuple(notes), stats={**best.stats, **stats})


def _plan_of(jobs: JobGraph, out: Outcome, name: str, watch: Stopwatch, stats: dict) -> Plan | None:
    """The engine's answer as a plan (None: it found none), with a latency model's rounding gap in ``stats``;
    an error where a latency model has no plan at all."""
    latency = jobs.problem.objective.kind == "latency"
    if out.status == "infeasible" and latency:
        raise InfeasibleError("no plan satisfies the memory and co-location constraints: raise the memory "
                              "limit or relax the groups")
    if out.device_of is None:
        return None
    plan = plan_from_jobs(jobs, out.device_of, out.start, solver=name, status=out.status, watch=watch)
    if latency and out.objective and plan.objective > 0:
        stats["rounding_gap"] = max(0.0, (plan.objective - out.objective) / plan.objective)
    return plan


def _whole_task_bound(out: Outcome, upper: float, problem: Problem) -> tuple[float, bool] | None:
    """A batch's whole-batch model's bound, which bounds every plan that runs each task whole, and whether it is
    their optimum (that model's, on a platform whose transfers it models: not where the receiver spends them);
    None where the engine proved nothing. An infeasible model has no plan within its horizon, the upper bound it
    was given."""
    if out.status == "unknown" or out.bound <= 0:
        return None
    return min(out.bound, upper), out.status == "optimal" and problem.platform.transfers == "overlapped"


def whole_batch_notes(problem: Problem) -> list[str]:
    """Why a batch was searched whole by the engines: tasks that must run on the whole batch (none: no note)."""
    if problem.objective.kind != "batch" or not problem.whole_batch:
        return []
    names = sorted(problem.whole_batch)
    return [f"{len(names)} task(s) must run on the whole batch at once (whole_batch: {', '.join(names[:3])}"
            f"{' ...' if len(names) > 3 else ''}), so the engine searched the whole batch only; the other tasks "
            "are cut by the baselines and the parts polish"]


def whole_task_note(plan: Plan, whole_bound: float, proven: bool, bound: float) -> str:
    """What a batch plan is worth against the plans that run every task on the whole batch at once, whose
    least makespan is at least ``whole_bound`` (``proven``: equal to it): where the batch bound is far below a
    plan, the cause is what cutting tasks into parts might gain, and this says how good the plan is without that.
    A plan within :data:`ROUNDING_GAP` of ``whole_bound`` meets it (the models round times down).

    >>> p = Plan("batch", (), objective=3.1, bound=1.9, status="timeout", solver="split", batch_size=8)
    >>> whole_task_note(p, 3.1, True, 1.9)
    'optimal among the plans that run every task on the whole batch at once (their optimum, 3.1 s, proven); a plan that cuts tasks into parts is bounded at 1.9 s here, 38.71% under it'
    """
    unit = f" {plan.time_unit}"
    split = any(len(parts) > 1 for parts in plan.parts.values())
    meets = plan.objective <= whole_bound * (1 + ROUNDING_GAP)  # within the models' rounding of times
    if meets and split:
        lead = 1 - plan.objective / whole_bound
        how = f"{format_gap(lead)} faster than" if lead > ROUNDING_GAP else "at least as fast as"
        return (f"{how} any plan that runs every task on the whole batch at once (those take at least "
                f"{whole_bound:.6g}{unit})")
    if meets:
        what = f"their optimum, {whole_bound:.6g}{unit}, proven" if proven else f"none under {whole_bound:.6g}{unit}"
        return (f"optimal among the plans that run every task on the whole batch at once ({what}); a plan that cuts "
                f"tasks into parts is bounded at {bound:.6g}{unit} here, {format_gap(1 - bound / plan.objective)} "
                "under it")
    return (f"the plans that run every task on the whole batch at once take at least {whole_bound:.6g}{unit} "
            f"({format_gap(1 - whole_bound / plan.objective)} under this plan)")


def _with_split_note(notes: list[str], sizes: tuple[int, ...]) -> list[str]:
    """``notes`` saying that the best plan splits the batch into ``sizes`` (once, the latest such split)."""
    if len(sizes) == 1:
        return notes
    return [n for n in notes if not n.startswith("batch split")] + [
        f"batch split into {len(sizes)} sub-batches ({'/'.join(map(str, sizes))} samples)"]


def _baseline_stats(baseline: Plan | None) -> dict:
    return {"baseline_objective": baseline.objective, "baseline_solver": baseline.solver} if baseline else {}


def _speedup(problem: Problem, best: Plan, watch: Stopwatch) -> dict[str, float]:
    """A batch plan's speed-up over the best single device, where one can run the model and time is left."""
    if (problem.objective.kind != "batch" or best.objective <= 0 or not best_device.candidates(problem)
            or watch.left <= BEST_DEVICE_S_PER_TASK * len(problem.graph)):
        return {}
    single = best_device.solve(problem, time_limit=watch.left)
    return {"best_device_objective": single.objective, "speedup_vs_best_device": single.objective / best.objective}


def _engine_status(latency: bool, statuses: list[str], splits: list, notes: list[str]) -> str:
    """The search's status from the engine's on each split (latency: its one solve's; batch: timeout where any
    split's solve was unfinished), with the note saying how a batch was searched."""
    if latency:
        return "optimal" if statuses == ["optimal"] else "timeout"
    notes.append(f"batch: exact over splits into sub-batches shared by all tasks, near-equal and "
                 f"speed-proportional (splits searched: {'; '.join('/'.join(map(str, s)) for s in splits)}; "
                 f"those whose HEFT makespan is over {SPLIT_SLACK:g}x the best are skipped); bound from the "
                 "general relaxation")
    return "timeout" if {"timeout", "unknown"} & set(statuses) else "feasible"
