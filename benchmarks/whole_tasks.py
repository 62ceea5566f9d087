"""Benchmark: is a batch plan's gap its plan's or its bound's? The best plan that cuts no task into parts, proved.

A batch plan whose every task runs whole is a plan of the latency problem in which each task takes the batch's
time and sends the batch's rows (:func:`diviml.problem.whole_tasks`). That problem is solved exactly (`exact`:
by pieces between series points, which the batch problem has not), so its optimum says how good a batch plan
can be without splitting tasks. For each zoo model at a batch of 8 on paper-server: the batch objective's lower
bound (plans that split tasks as they like), the default solver's batch plan, and the whole-task optimum with
its bound and status. Where the plan meets the whole-task optimum, the gap to the batch bound is all in what
splitting tasks could gain, which the bound allows and no plan found takes. Where the plan keeps a device busy
all the time (its busy share), that device's work is the plan's makespan: a better plan must take work off it
(the split most of the plan's tasks run in shows where that work comes from). Prints a table and writes
benchmarks/results/whole_tasks.md.

    python benchmarks/whole_tasks.py                         # the committed table (60 s a solve)
    python benchmarks/whole_tasks.py --models googlenet --limit 20
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import diviml
from diviml.bounds import lower_bound, lower_bound_source
from diviml.problem import whole_tasks
from diviml.simulate import schedule

sys.path.insert(0, str(Path(__file__).parent))
from split_models import model_graph, timed  # noqa: E402  (zoo graphs with batch tables 1-8, cached)

OUT = Path(__file__).parent / "results" / "whole_tasks.md"
MODELS = ("resnet50", "googlenet", "inception_v3", "densenet121", "mobilenet_v3_large", "gpt2-small")


def row(name: str, limit: float) -> str:
    problem = diviml.Problem(model_graph(name), diviml.preset("paper-server"), diviml.Objective("batch", 8))
    started = time.perf_counter()
    bound, source = lower_bound(problem, limit), lower_bound_source(problem)
    bound_s = time.perf_counter() - started
    plan, plan_s = timed(problem, "auto", limit)
    bound, source = max((bound, source), (plan.bound, plan.bound_source))
    whole, whole_s = timed(whole_tasks(problem), "exact", limit)
    split_tasks = sum(len(parts) > 1 for parts in plan.parts.values())
    ms = 1e3
    return (f"| {name} | {len(problem.graph)} | {bound * ms:.4g} ({source}) | {bound_s:.1f} | {plan.objective * ms:.4g} "
            f"({plan.solver}, {split_tasks} tasks split) | {plan_s:.0f} | {busy_shares(problem, plan)} | "
            f"{most_common_split(plan)} | {whole.objective * ms:.4g} | "
            f"{whole.bound * ms:.4g} | {whole.status} | {whole_s:.0f} | {100 * (plan.objective / whole.objective - 1):+.2f}% | "
            f"{100 * (1 - bound / whole.bound):.1f}% |")


def busy_shares(problem: diviml.Problem, plan: diviml.Plan) -> str:
    """Each device's busy time in the plan's schedule over its makespan, e.g. ``cpu 1%, v100 94%, a100 100%``."""
    timed_plan = schedule(problem, plan.parts, plan.device_order)
    busy = {d.name: 0.0 for d in problem.platform.devices}
    for job in timed_plan.jobs:
        busy[job.device] += job.finish - job.start
    return ", ".join(f"{d} {100 * b / timed_plan.makespan:.0f}%" for d, b in busy.items())


def most_common_split(plan: diviml.Plan) -> str:
    """The parts most tasks run in and how many do, e.g. ``a100 5 + v100 3 (174)``."""
    shapes = Counter(" + ".join(f"{d} {b}" for d, b in parts) for parts in plan.parts.values())
    shape, count = shapes.most_common(1)[0]
    return f"{shape} ({count})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--limit", type=float, default=60.0, help="seconds for each solve (and the batch bound)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    head = ("| model | tasks | batch bound, ms (source) | s | batch plan, ms (solver) | s | busy in the plan | "
            "its most common split (tasks) | whole-task optimum, ms | its bound, ms | status | s | "
            "plan vs whole-task optimum | most splitting could gain |\n" + "|---" * 14 + "|\n")
    lines = []
    for name in args.models:
        lines.append(row(name, args.limit))
        print(lines[-1], file=sys.stderr, flush=True)
    text = (f"# Batch plans against the best plan of whole tasks\n\n`python benchmarks/whole_tasks.py --limit "
            f"{args.limit:g}{'' if args.models == list(MODELS) else ' --models ' + ' '.join(args.models)}`\n\n"
            + head + "\n".join(lines) + "\n\nPlatform paper-server (a CPU, a V100 and an A100), analytic roofline "
            "costs with batch tables 1, 2, 4, 8; a batch of 8. Batch bound: the batch objective's (plans may cut "
            "tasks into parts). Whole-task optimum: `exact` on `whole_tasks(problem)` (every task runs the whole "
            "batch at once), a lower bound of every batch plan that splits no task. Most splitting could gain: "
            "1 - batch bound / whole-task bound, what a plan that splits tasks could at most save against the best "
            "plan that does not. Busy in the plan: each device's busy time over the plan's makespan (its "
            "schedule as the simulator times it).\n")
    print(text)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
