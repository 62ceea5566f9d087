"""Benchmark: is a batch gap the bound's or the plan's? One module, every way to cut its tasks, solved exactly.

The batch gap on the zoo is already there in one module: the tasks from one series point to the next, as a
problem of their own (`docs/bounds-research.md`, "Batches"). Such a module is small enough for a CP-SAT model of
every batch plan: for each task, each range of consecutive samples and each device, an optional part (the
simulator's parts are such ranges); every sample of a task in exactly one part; each device running one part at
a time; a part starting after every producer part it shares samples with has ended and its rows have moved
(:func:`diviml.simulate.schedule`'s rule). Memory is left out and times are rounded down to ticks, so the
model's bound bounds the module's plans, and where CP-SAT proves its optimum, that is the module's optimum
(paper-server's memory holds any module whole). For each module: the batch bound diviml reports
(`lower_bound`), `exact`'s plan, this model's best plan (timed by the simulator) and bound, minimising and
then probing cutoffs (:func:`probe_every_cut`), and a candidate bound that follows each sample
(:func:`per_sample_bound`). Prints a table and writes
benchmarks/results/module_optimum.md.

    python benchmarks/module_optimum.py                              # the committed table (about 12 minutes)
    python benchmarks/module_optimum.py --modules resnet50:3:2 --limit 30
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from ortools.sat.python import cp_model
from scipy.optimize import Bounds, LinearConstraint, milp

import diviml
from diviml.bounds import lower_bound
from diviml.bounds._lp import _Sparse, _unit
from diviml.bounds._series import series_points
from diviml.native import native_output_discarded
from diviml.simulate import schedule
from diviml.solvers.engines.cpsat import _solver as cpsat_solver
from diviml.solvers.engines.probes import PORTFOLIO

sys.path.insert(0, str(Path(__file__).parent))
from split_models import model_graph  # noqa: E402  (zoo graphs with batch tables 1-8, cached)

OUT = Path(__file__).parent / "results" / "module_optimum.md"
MODULES = ("resnet50:3:2", "resnet50:3:3", "resnet50:25:3", "googlenet:10:2", "inception_v3:20:2")
TICKS = 200_000  # ticks in the starting plan's makespan: times rounded down to them lose at most 1/200,000 each

Part = tuple[str, int, int, str]  # task, first sample, samples, device


def module_problem(name: str, first: int, batch: int) -> diviml.Problem:
    """The tasks of zoo model ``name`` from its ``first`` series point to the next, a batch on paper-server."""
    graph, platform = model_graph(name), diviml.preset("paper-server")
    order, _, series = series_points(diviml.Problem(graph, platform, diviml.Objective("batch", batch)))
    points = [t for t in order if t in series]
    ids = order[order.index(points[first]):order.index(points[first + 1]) + 1]
    return diviml.Problem(graph.subgraph(ids, f"{name} module {first}"), platform, diviml.Objective("batch", batch))


def every_cut_model(problem: diviml.Problem, tick: float, horizon: int, floor: int):
    """The CP-SAT model of every batch plan of ``problem`` in ``tick``s: (model, makespan, parts), parts mapping
    (task, first sample, samples, device) to (presence, start, duration)."""
    graph, batch, model = problem.graph, problem.batch_size, cp_model.CpModel()
    ticks = lambda seconds: int(math.floor(seconds / tick + 1e-9))  # noqa: E731  (rounded down: a bound)
    parts: dict[Part, tuple] = {}
    for t in graph.topological_order:  # phase 1: the parts, and each sample in one of them
        own: list[Part] = []
        for first in range(batch):
            for size in range(1, batch - first + 1):
                for d in problem.allowed_devices[t]:
                    present = model.new_bool_var(f"present[{t},{first},{size},{d}]")
                    start = model.new_int_var(0, horizon, f"start[{t},{first},{size},{d}]")
                    duration = ticks(problem.time(t, d, size))
                    interval = model.new_optional_fixed_size_interval_var(start, duration, present,
                                                                          f"part[{t},{first},{size},{d}]")
                    parts[t, first, size, d] = (present, start, duration, interval)
                    own.append((t, first, size, d))
        for sample in range(batch):
            model.add_exactly_one(parts[key][0] for key in own if key[1] <= sample < key[1] + key[2])
    for d in problem.platform.devices:  # phase 2: a device runs one part at a time
        model.add_no_overlap(v[3] for key, v in parts.items() if key[3] == d.name)
    of_task: dict[str, list[Part]] = {}
    for key in parts:
        of_task.setdefault(key[0], []).append(key)
    for u, v in graph.edges:  # phase 3: a part waits for the producer parts whose rows it reads
        for _, first, size, d in of_task[v]:
            reader = parts[v, first, size, d]
            for _, first_u, size_u, d_u in of_task[u]:
                shared = min(first + size, first_u + size_u) - max(first, first_u)
                if shared > 0:
                    producer = parts[u, first_u, size_u, d_u]
                    moved = ticks(problem.transfer(u, d_u, d, shared / graph.batch_size))
                    model.add(reader[1] >= producer[1] + producer[2] + moved).only_enforce_if([reader[0], producer[0]])
    makespan = model.new_int_var(floor, horizon, "makespan")  # phase 4: the makespan, from the bound up
    for present, start, duration, _ in parts.values():
        model.add(makespan >= start + duration).only_enforce_if(present)
    model.minimize(makespan)
    return model, makespan, parts


def solve_every_cut(problem: diviml.Problem, start: diviml.Plan, floor: float, limit: float,
                    cutoff: float | None = None):
    """(best plan's makespan as the simulator times it, proven bound, CP-SAT's status), in seconds; ``start``
    (a valid plan) is the hint and sets the time scale, ``floor`` a known bound. ``cutoff``: only plans ending by
    it, stopping at the first (status "infeasible": none does, so the cutoff is a bound)."""
    tick = start.objective / TICKS
    model, makespan, parts = every_cut_model(problem, tick, TICKS + 1, int(math.floor(floor / tick)))
    if cutoff is not None:
        model.add(makespan <= int(math.floor(cutoff / tick)))
    jobs = schedule(problem, start.parts, start.device_order).jobs
    for job in jobs:
        model.add_hint(parts[job.task, job.offset, job.batch, job.device][1], int(job.start / tick))
    used = {(j.task, j.offset, j.batch, j.device) for j in jobs}
    for key, (present, *_) in parts.items():
        model.add_hint(present, key in used)
    if cutoff is None:
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = limit
        solver.parameters.num_workers = os.cpu_count() or 1
    else:  # a feasibility test, with the workers and parameters of diviml's own probes (CP-SAT's default seed)
        solver = cpsat_solver(limit, seed=1, workers=min(os.cpu_count() or 1, len(PORTFOLIO)), small=False,
                              first_only=True, work_limit=None, portfolio=PORTFOLIO)
    status = solver.solve(model)
    if status == cp_model.INFEASIBLE:
        return math.nan, cutoff, "infeasible"
    bound = max(solver.best_objective_bound * tick, floor)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return math.nan, bound, solver.status_name(status)
    chosen = sorted((solver.value(v[1]), key) for key, v in parts.items() if solver.value(v[0]))
    plan_parts = {t: sorted((k for _, k in chosen if k[0] == t), key=lambda k: k[1])
                  for t in problem.graph.topological_order}
    order: dict[str, list[tuple[str, int]]] = {d.name: [] for d in problem.platform.devices}
    for _, key in chosen:
        order[key[3]].append((key[0], plan_parts[key[0]].index(key)))
    timed = schedule(problem, {t: [(k[3], k[2]) for k in ks] for t, ks in plan_parts.items()}, order).makespan
    return timed, bound, solver.status_name(status).lower()


def probe_every_cut(problem: diviml.Problem, start: diviml.Plan, floor: float, incumbent: float, limit: float):
    """(the largest cutoff proven out, the best plan's makespan, seconds): cutoffs on the model of every cut from
    ``floor`` up in steps of an eighth of its gap to ``incumbent``, each with the time left, as `exact` probes a
    latency model (:mod:`diviml.solvers.engines.probes`); a plan that meets a cutoff is the new incumbent.
    ``start``: the hint and time scale, as in :func:`solve_every_cut`."""
    began, lower, best = time.perf_counter(), floor, incumbent
    step = (best - floor) / 8
    while (left := limit - (time.perf_counter() - began)) > 1 and lower + step < best:
        cutoff = lower + step
        met, _, status = solve_every_cut(problem, start, lower, left, cutoff=cutoff)
        if status == "infeasible":
            lower = cutoff
        elif math.isfinite(met):
            best = min(best, met)
            step = min(step, (best - lower) / 2)
        else:
            break
    return lower, best, time.perf_counter() - began


def per_sample_bound(problem: diviml.Problem, seconds: float, sized: bool = False) -> float:
    """A MILP bound (HiGHS, ``seconds``) that follows each sample: a 0/1 device for each sample at each task (and
    part size, where ``sized``), a whole number of parts of each size on each device (the device's work, at most
    the makespan), and each sample's own path: at a task at least its least time there (its part's time, where
    ``sized``), and on an edge whose two ends it runs on different devices at least one sample's rows moved.
    Memory is left out; every plan is such a solution. Times are scaled as the LP bounds scale them (``_unit``),
    away from HiGHS's tolerances."""
    graph, batch, rows = problem.graph, problem.batch_size, []
    unit = _unit({t: {d: problem.time(t, d, 1) for d in problem.allowed_devices[t]} for t in graph.topological_order})
    time_of = lambda t, d, k: unit * problem.time(t, d, k)  # noqa: E731
    cols: dict[tuple, int] = {}
    col = lambda *key: cols.setdefault(key, len(cols))  # noqa: E731
    sizes = range(1, batch + 1)
    # x keys: (sample, task, device, size) where sized, else (sample, task, device) for every size
    on = (lambda s, t, d, k: ("x", s, t, d, k)) if sized else (lambda s, t, d, k: ("x", s, t, d))
    keys = (lambda s, t, d: [on(s, t, d, k) for k in sizes]) if sized else (lambda s, t, d: [on(s, t, d, 1)])
    for t in graph.topological_order:
        for d in problem.allowed_devices[t]:  # the parts on d (of size k, where sized) hold the samples there
            for ks in ([[k] for k in sizes] if sized else [list(sizes)]):
                rows.append(({**{col("m", t, d, k): float(k) for k in ks},
                              **{col(*on(s, t, d, ks[0])): -1.0 for s in range(batch)}}, 0.0, 0.0))
        least = {(d, k): time_of(t, d, k) if sized else min(time_of(t, d, j) for j in sizes)
                 for d in problem.allowed_devices[t] for k in (sizes if sized else [1])}
        for s in range(batch):
            rows.append(({col(*key): 1.0 for d in problem.allowed_devices[t] for key in keys(s, t, d)}, 1.0, 1.0))
            rows.append(({col("time", s, t): 1.0, **{col(*on(s, t, d, k)): -x for (d, k), x in least.items()}},
                         0.0, np.inf))
            rows.append(({col("C"): 1.0, col("start", s, t): -1.0, col("time", s, t): -1.0}, 0.0, np.inf))
    for d in problem.platform.devices:  # each device's work
        rows.append(({**{col("m", t, d.name, k): time_of(t, d.name, k) for t in graph.topological_order
                         if d.name in problem.allowed_devices[t] for k in sizes}, col("C"): -1.0}, -np.inf, 0.0))
    for u, v in graph.edges:  # each sample's path, a crossing paying one sample's rows
        for s in range(batch):
            after = {col("start", s, v): 1.0, col("start", s, u): -1.0, col("time", s, u): -1.0}
            rows.append((after, 0.0, np.inf))
            for d_u in problem.allowed_devices[u]:
                for d_v in problem.allowed_devices[v]:
                    moved = unit * problem.transfer(u, d_u, d_v, 1 / graph.batch_size) if d_u != d_v else 0.0
                    if moved > 0:  # both ends' devices chosen: after + moved; else a bound of at most after
                        ends = {col(*key): -moved for key in keys(s, u, d_u) + keys(s, v, d_v)}
                        rows.append(({**after, **ends}, -moved, np.inf))
    n, matrix = len(cols), _Sparse()
    for i, (coefficients, _, _) in enumerate(rows):
        for j, x in coefficients.items():
            matrix.add(i, j, x)
    cost, integral, upper = np.zeros(n), np.zeros(n), np.full(n, np.inf)
    cost[cols["C",]] = 1.0
    for key, j in cols.items():
        integral[j] = key[0] in ("x", "m")
        upper[j] = 1.0 if key[0] == "x" else np.inf
    with native_output_discarded():  # HiGHS's MILP prints a line now and then as it mends a solution
        result = milp(cost, constraints=LinearConstraint(matrix.matrix(len(rows), n), [lo for _, lo, _ in rows],
                                                         [hi for _, _, hi in rows]),
                      integrality=integral, bounds=Bounds(0, upper), options={"time_limit": seconds, "disp": False})
    return result.mip_dual_bound / unit if result.mip_dual_bound is not None else 0.0


def row(module: str, limit: float, probe_limit: float) -> str:
    name, first, batch = module.split(":")
    problem = module_problem(name, int(first), int(batch))
    bound = lower_bound(problem, limit)
    plan = diviml.solve(problem, "exact", time_limit=limit)
    started = time.perf_counter()
    best, proven, status = solve_every_cut(problem, plan, bound, limit)
    every_s, started = time.perf_counter() - started, time.perf_counter()
    best = min(best, plan.objective) if math.isfinite(best) else plan.objective
    cut, probed, probe_s = (proven, best, 0.0) if status == "optimal" else probe_every_cut(
        problem, plan, max(bound, proven), best, probe_limit)
    proven, best, started = max(proven, cut), min(best, probed), time.perf_counter()
    by_sample = per_sample_bound(problem, limit)
    sample_s, started = time.perf_counter() - started, time.perf_counter()
    sized = per_sample_bound(problem, limit, sized=True)
    us = 1e6
    return (f"| {name} | {first} | {len(problem.graph)} | {batch} | {bound * us:.1f} | {plan.objective * us:.1f} | "
            f"{best * us:.1f} | {proven * us:.1f} | {status} | {every_s:.0f} | {probe_s:.0f} | "
            f"{100 * (1 - bound / proven):.1f}% | {100 * (plan.objective / best - 1):.1f}% | "
            f"{by_sample * us:.1f} | {sample_s:.0f} | {sized * us:.1f} | {time.perf_counter() - started:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", nargs="+", default=list(MODULES), help="model:series point:batch")
    ap.add_argument("--limit", type=float, default=45.0, help="seconds for exact and for the model of every cut")
    ap.add_argument("--probe-limit", type=float, default=120.0,
                    help="seconds for cutoffs on the model of every cut, where minimising did not prove it")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    head = ("| model | from series point | tasks | batch | batch bound, us | exact's plan, us | every cut: best "
            "plan, us | its bound, us | status | s | cutoffs, s | bound below the proven bound | exact's plan above "
            "the best | per-sample MILP bound, us | s | the same, paths at part sizes, us | s |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(head)
    rows = []
    for module in args.modules:
        rows.append(row(module, args.limit, args.probe_limit))
        print(rows[-1], flush=True)
    command = f"python benchmarks/module_optimum.py --limit {args.limit:g} --probe-limit {args.probe_limit:g}"
    if args.modules != list(MODULES):
        command += " --modules " + " ".join(args.modules)
    text = (f"# One module, every way to cut its tasks\n\n`{command}`\n\n{head}\n" + "\n".join(rows)
            + "\n\nA module: the tasks from a series point of the zoo model to the next, alone, on paper-server; "
            "analytic costs. Batch bound: `lower_bound` (the LP bounds). Every cut: the CP-SAT model of every batch "
            "plan (memory left out, times rounded down, so its bound is one), started from exact's plan, minimised "
            "for --limit s and, where that does not prove it, asked for plans by cutoffs from its bound up for "
            "--probe-limit s (as `exact` probes a latency model): its bound is the largest cutoff it proved no plan "
            "meets, its best plan the best it found either way (timed by the simulator); where its status is optimal, "
            "its best plan is the module's optimum. Bound below the proven bound: 1 - batch bound / that model's "
            "bound, how much of the gap is the bound's. Per-sample MILP bound: "
            "`per_sample_bound` (HiGHS's proven bound in the same time); paths at part sizes: its `sized` form, each "
            "sample's time at a task its part's.\n")
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
