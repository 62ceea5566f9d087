"""Benchmark: which solver `--solver auto` should pick for latency and batch (issue 27, item 1).

Runs `exact` (pieces between series points where it can), `exact --no-decompose` (one model) and `split`
at the same time limit on: layered DNN-like DAGs (20-320 tasks), randomly wired DAGs without series points
(16-96 tasks, communication ratios about 0.3 and 1), zoo models with analytic costs (paper-server) and the
profiled resnet50 on the H100 server; latency, and batch 8 on some. For each instance it prints the features
`auto` can see before solving (tasks, pieces between series points, the largest piece's share of the
tasks), each solver's plan and gap to the best bound any of them proved, and what `auto` picked, so the rule
in `diviml.solvers.auto` can be read off the table. Writes benchmarks/results/auto_choice.md.

    python benchmarks/auto_choice.py                  # the committed table (20 s a solve, about 25 minutes)
    python benchmarks/auto_choice.py --limit 5 --only random
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import diviml
from diviml.generators import layered_dag, random_dag
from diviml.solvers import auto
from diviml.validate import validate

sys.path.insert(0, str(Path(__file__).parent))
from split_models import model_graph  # noqa: E402  (the cached zoo graphs with analytic costs)

OUT = Path(__file__).parent / "results" / "auto_choice.md"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def instances(only: str | None):
    """(family, name, problem) triples."""
    paper = diviml.preset("paper-server")
    latency, batch8 = diviml.Objective("latency"), diviml.Objective("batch", batch_size=8)
    if only in (None, "layered"):
        for n in (20, 40, 80, 160, 320):
            g = layered_dag(n, seed=0)
            yield "layered", g.name, diviml.Problem(g, paper, latency)
        for n in (40, 160):
            g = layered_dag(n, seed=1)
            yield "layered", g.name + " batch 8", diviml.Problem(g, paper, batch8)
    if only in (None, "random"):
        for n in (16, 32, 48, 64, 96):
            for label, ccr in (("ccr0.3", (0.2, 0.4)), ("ccr1", (0.8, 1.2))):
                g = random_dag(n, seed=n, ccr=ccr)
                yield "random", f"{g.name} {label}", diviml.Problem(g, paper, latency)
        g = random_dag(32, seed=5)
        yield "random", g.name + " batch 8", diviml.Problem(g, paper, batch8)
    if only in (None, "zoo"):
        for name in ("gpt-tiny", "resnet50", "googlenet"):
            g = model_graph(name)
            yield "zoo", name, diviml.Problem(g, paper, latency)
            yield "zoo", name + " batch 8", diviml.Problem(g, paper, batch8)
        g = diviml.TaskGraph.load(EXAMPLES / "resnet50_h100.json")
        yield "zoo", "resnet50_h100.json (profiled)", diviml.Problem(g, diviml.preset("h100-server"), latency)


def solve(problem, solver: str, limit: float, **options) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    plan = diviml.solve(problem, solver, time_limit=limit, **options)
    seconds = time.perf_counter() - t0
    assert validate(plan, problem).ok, f"{solver} returned a plan the validator rejects"
    return plan.objective, plan.bound, seconds


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=20.0, help="seconds for every solve")
    ap.add_argument("--only", choices=("layered", "random", "zoo"))
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    rows = []
    head = ("| family | instance | tasks | pieces | largest piece | exact | no-decompose | split | best bound "
            "| exact gap | no-dec. gap | split gap | auto picks | auto's loss |")
    lines = [f"# `auto`: exact, exact --no-decompose and split at {args.limit:g} s each", "",
             "Plan values in the graph's time unit; gaps to the best bound any of the three proved; "
             "'auto's loss': how far the picked solver's plan is above the best of the three.", "",
             head, "|" + "---|" * (head.count("|") - 1)]
    print("\n".join(lines), flush=True)
    for family, name, problem in instances(args.only):
        features = auto.features(problem)
        values = {}
        bounds = []
        for key, solver, options in (("exact", "exact", {}), ("no-decompose", "exact", {"decompose": False}),
                                     ("split", "split", {})):
            value, bound, seconds = solve(problem, solver, args.limit, **options)
            values[key] = (value, seconds)
            bounds.append(bound)
        best_bound = max(bounds)
        best = min(v for v, _ in values.values())
        picked, _ = auto.choose(problem)
        loss = values[picked][0] / best - 1

        def cell(key):
            return f"{values[key][0]:.6g} ({values[key][1]:.0f} s)"

        def gap(key):
            return f"{(values[key][0] - best_bound) / values[key][0]:.2%}"

        row = (f"| {family} | {name} | {features.tasks} | {features.pieces} | {features.largest_share:.0%} "
               f"| {cell('exact')} | {cell('no-decompose')} | {cell('split')} | {best_bound:.6g} "
               f"| {gap('exact')} | {gap('no-decompose')} | {gap('split')} | {picked} | {loss:.2%} |")
        rows.append((loss, row))
        print(row, flush=True)
        lines.append(row)
    worst = max(loss for loss, _ in rows)
    lines += ["", f"Worst loss of `auto` against the best of the three: {worst:.2%} over {len(rows)} instances.",
              "", "Reproduce: `python benchmarks/auto_choice.py" + (f" --limit {args.limit:g}" if args.limit != 20 else "")
              + (f" --only {args.only}" if args.only else "") + "`"]
    print(lines[-3])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
