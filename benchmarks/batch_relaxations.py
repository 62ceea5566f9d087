"""Benchmark: the batch path-work LP, plain and strengthened, and bounds of classes of plans beyond it (issue 25).

For each zoo model at a batch of 8 on paper-server: the least makespan of the plain LP, of the LP with the rows
of :mod:`diviml.bounds._batch_rows` (what :func:`diviml.bounds.batch_path_work_bound` now returns), and of the
strengthened LP restricted three ways, each a bound only of the plans it admits: at least two parts of every
task (where it rises far above, the LP's plans are the ones that run tasks whole), and the host CPU running only
whole tasks, or nothing (where they rise far above, the LP's plans lean on the CPU taking a sample or two of a
task beside the GPUs' parts). ``--milp SECONDS`` also solves the strengthened LP with whole part counts (HiGHS):
its proven bound, its best solution, and that solution's parts timed by the simulator. Prints a table and writes
benchmarks/results/batch_relaxations.md.

    python benchmarks/batch_relaxations.py                       # the LPs, about two minutes
    python benchmarks/batch_relaxations.py --models resnet50 --milp 60
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

import diviml
from diviml.bounds._batch import batch_path_work_lp, size_ranges
from diviml.bounds._lp import _KeyedLP, _least_makespan, _Sparse
from diviml.native import native_output_discarded
from diviml.simulate import schedule

sys.path.insert(0, str(Path(__file__).parent))
from split_models import model_graph  # noqa: E402  (zoo graphs with batch tables 1-8, cached)

OUT = Path(__file__).parent / "results" / "batch_relaxations.md"
MODELS = ("resnet50", "googlenet", "inception_v3", "densenet121", "mobilenet_v3_large", "gpt2-small")


def add_two_parts(problem: diviml.Problem, lp: _KeyedLP) -> None:
    """At least two parts of every task: sum over sizes of samples / largest size of the range >= 2."""
    ranges = size_ranges(problem.batch_size)
    for t in problem.graph.topological_order:
        lp.ub({("u", t, d, r): -1.0 / hi for d in problem.allowed_devices[t] for r, (_, hi) in enumerate(ranges)
               if lp.has(("u", t, d, r))}, -2.0)


def host_parts_at_least(problem: diviml.Problem, lp: _KeyedLP, least: int) -> None:
    """No part of fewer than ``least`` samples on a host CPU (the batch: only whole tasks; above it: none)."""
    ranges = size_ranges(problem.batch_size)
    hosts = {d.name for d in problem.platform.devices if d.is_host}
    for key in lp.index:
        if key[0] == "u" and key[2] in hosts and ranges[key[3]][1] < least:
            lp.ub({key: 1.0}, 0.0)


def strengthened_with(problem: diviml.Problem, restrict: Callable[[diviml.Problem, _KeyedLP], None]) -> float:
    """The least makespan (seconds) of the strengthened LP with ``restrict``'s rows added (0 where not proven)."""
    built = batch_path_work_lp(problem, None, strengthened=True)
    assert built is not None  # no deadline: it is always built
    restrict(problem, built[0])
    return _least_makespan(built, None) or 0.0


def whole_part_counts(problem: diviml.Problem, lp: _KeyedLP, unit: float, seconds: float) -> tuple[float, float, float]:
    """``lp`` with a whole number of parts of each size per task and device (HiGHS, ``seconds``): its proven bound,
    its best solution, and that solution's parts timed by the simulator (list order), all in seconds."""
    ranges = size_ranges(problem.batch_size)
    samples = [key for key in lp.index if key[0] == "u"]
    for key in samples:
        lp.col(("p", *key[1:]))
    a, low, high, row = _Sparse(), [], [], 0
    for rows, lows, highs in ((lp.rows_ub, [-np.inf] * len(lp.rows_ub), lp.rhs_ub),
                              (lp.rows_eq, [1.0] * len(lp.rows_eq), [1.0] * len(lp.rows_eq))):
        for coefficients, lo, hi in zip(rows, lows, highs):
            for j, x in coefficients.items():
                a.add(row, j, x)
            low.append(lo)
            high.append(hi)
            row += 1
    for key in samples:  # samples in parts of size b = b x parts (single sizes: a batch of at most 16)
        a.add(row, lp.index[key], 1.0)
        a.add(row, lp.index[("p", *key[1:])], -float(ranges[key[3]][0]))
        low.append(0.0)
        high.append(0.0)
        row += 1
    n_cols = len(lp.index)
    cost, integral = np.zeros(n_cols), np.zeros(n_cols)
    cost[lp.index[("C",)]] = 1.0
    for key in samples:
        integral[lp.index[("p", *key[1:])]] = 1.0
    with native_output_discarded():  # HiGHS's MILP prints a line now and then as it mends a solution
        res = milp(cost, constraints=LinearConstraint(a.matrix(row, n_cols), low, high), integrality=integral,
                   bounds=Bounds(0, np.inf), options={"time_limit": seconds, "disp": False})
    proven = res.mip_dual_bound / unit if res.mip_dual_bound is not None else float("nan")  # none in the time
    if res.x is None:
        return proven, float("nan"), float("nan")
    parts: dict[str, list[tuple[str, int]]] = {t: [] for t in problem.graph.topological_order}
    for key in samples:
        parts[key[1]] += [(key[2], ranges[key[3]][0])] * round(res.x[lp.index[("p", *key[1:])]])
    return proven, res.fun / unit, schedule(problem, parts).makespan


def row(name: str, milp_seconds: float) -> str:
    problem = diviml.Problem(model_graph(name), diviml.preset("paper-server"), diviml.Objective("batch", 8))
    started = time.perf_counter()
    plain = _least_makespan(batch_path_work_lp(problem, None), None) or 0.0
    lp, unit = batch_path_work_lp(problem, None, strengthened=True)
    strengthened = _least_makespan((lp, unit), None) or 0.0
    every_task_cut = strengthened_with(problem, add_two_parts)
    host = [strengthened_with(problem, partial(host_parts_at_least, least=least))
            for least in (problem.batch_size, problem.batch_size + 1)]  # whole tasks only; nothing
    ms = 1e3
    cells = [name, f"{plain * ms:.4f}", f"{strengthened * ms:.4f} ({100 * (strengthened / plain - 1):+.1f}%)",
             f"{every_task_cut * ms:.4f}", *(f"{value * ms:.4f}" for value in host)]
    if milp_seconds > 0:
        proven, best, timed = whole_part_counts(problem, lp, unit, milp_seconds)
        cells += [f"{proven * ms:.4f}", f"{best * ms:.4f}", f"{timed * ms:.2f}"]
    cells.append(f"{time.perf_counter() - started:.0f}")
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--milp", type=float, default=0.0, help="seconds for the whole-part-count program (0: not run)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    columns = ["model", "plain LP, ms", "strengthened (the bound now)", "strengthened, every task in >= 2 parts",
               "strengthened, the CPU running only whole tasks", "strengthened, the CPU idle"]
    if args.milp > 0:
        columns += [f"whole part counts: proven in {args.milp:g} s", "its best", "its parts simulated"]
    head = "| " + " | ".join(columns + ["s"]) + " |\n" + "|---" * (len(columns) + 1) + "|\n"
    lines = []
    print(head, end="", flush=True)
    for name in args.models:
        lines.append(row(name, args.milp))
        print(lines[-1], flush=True)
    command = "python benchmarks/batch_relaxations.py" + (f" --milp {args.milp:g}" if args.milp > 0 else "")
    if args.models != list(MODELS):
        command += " --models " + " ".join(args.models)
    text = (f"# Candidate strengthenings of the batch path-work LP\n\n`{command}`\n\n" + head + "\n".join(lines)
            + "\n\nA batch of 8 on paper-server; least makespans in ms, each a lower bound of every batch plan "
            "except the last three columns, each a bound of a class of plans: those that cut every task into at least "
            "two parts, those that cut no task on the CPU, and those that run nothing on it. "
            "The strengthened LP is the batch path-work bound the solvers use (README, Design, \"Batch bounds\").\n")
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
