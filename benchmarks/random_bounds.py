"""Benchmark: certified gaps on randomly wired DAGs without series points (issue 25, item 3).

Eight instances of 32-64 tasks (:func:`diviml.generators.random_dag`, seeds 100 + n) on paper-server (a CPU,
a V100 and an A100), communication ratios about 0.3 and 1, latency. For each: HEFT; the problem's lower
bound before any search (the LP bounds, the energetic LP among them) and its time; then `exact` given
--limit seconds as it runs by default (the energetic cuts, no windows) and with a quarter of the time on
the windows' bound first (``window_share=0.25``): plan, bound, where the bound came from, gap. Prints a
table and writes benchmarks/results/random_bounds.md.

    python benchmarks/random_bounds.py              # the committed table (30 s a solve, about 9 minutes)
    python benchmarks/random_bounds.py --limit 10 --sizes 40
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import diviml
from diviml.bounds import lower_bound, lower_bound_source
from diviml.generators import random_dag
from diviml.validate import validate

OUT = Path(__file__).parent / "results" / "random_bounds.md"
RATIOS = (("0.3", (0.2, 0.4)), ("1", (0.8, 1.2)))


def solve(problem, solver: str, limit: float, **options) -> tuple[diviml.Plan, float]:
    t0 = time.perf_counter()
    plan = diviml.solve(problem, solver, time_limit=limit, **options)
    seconds = time.perf_counter() - t0
    assert validate(plan, problem).ok, f"{solver} returned a plan the validator rejects"
    return plan, seconds


def row(n: int, label: str, ccr: tuple[float, float], limit: float) -> str:
    graph = random_dag(n, seed=100 + n, ccr=ccr)
    problem = diviml.Problem(graph, diviml.preset("paper-server"), diviml.Objective("latency"))
    heft, _ = solve(problem, "heft", limit)
    fresh, t0 = diviml.Problem(graph, problem.platform, problem.objective), time.perf_counter()  # nothing kept
    before = lower_bound(fresh)
    cells = [f"{graph.name}", label, f"{heft.objective:.6g}", f"{before:.6g} ({lower_bound_source(fresh)})",
             f"{time.perf_counter() - t0:.1f}"]
    for share in (None, 0.25):
        plan, seconds = solve(problem, "exact", limit, **({} if share is None else {"window_share": share}))
        cells += [f"{plan.objective:.6g}", f"{plan.bound:.6g} ({plan.bound_source})", f"{100 * plan.gap:.2f}%",
                  f"{seconds:.0f}"]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=30.0, help="seconds for each exact solve")
    ap.add_argument("--sizes", type=int, nargs="+", default=[32, 40, 48, 64])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    header = ("| instance | comm. ratio | HEFT | bound before search | s | exact | its bound | its gap | s | "
              "exact, windows 1/4 | its bound | its gap | s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(header, flush=True)
    rows = []
    for n in args.sizes:
        for label, ccr in RATIOS:
            rows.append(row(n, label, ccr, args.limit))
            print(rows[-1], flush=True)
    text = (f"# Certified gaps on randomly wired DAGs: the energetic LP and exact with its cuts\n\n"
            f"`python benchmarks/random_bounds.py --limit {args.limit:g} --sizes {' '.join(map(str, args.sizes))}`\n\n"
            f"{header}\n" + "\n".join(rows) + "\n\nPlatform paper-server; latency; each exact solve given "
            f"{args.limit:g} s on this 2-core machine (with the windows, they take a quarter of it before the "
            "whole model's search, which starts from their bound). CP-SAT's search is not deterministic under a "
            "time limit: plans and bounds move between runs.\n")
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
