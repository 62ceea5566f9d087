"""Benchmark: certified gaps on randomly wired DAGs without series points (issue 25, item 3).

Sixteen instances of 32-64 tasks (:func:`diviml.generators.random_dag`) on paper-server (a CPU, a V100 and an
A100), latency: sizes 32, 40, 48 and 64 with seeds 100 + n at communication ratios about 0.3 and 1 (the first
eight), and eight more of seeds 300 + n (sizes 32-64). For each: HEFT; the problem's lower bound before any
search (the LP bounds, the energetic LP among them) and its time; then `exact` given --limit seconds as it runs
by default (minimising, then probing cutoffs): plan, bound, where the bound came from, gap, and how many
cutoffs it probed. Prints a table and writes benchmarks/results/random_bounds.md.

    python benchmarks/random_bounds.py              # the committed table (30 s a solve, about 10 minutes)
    python benchmarks/random_bounds.py --limit 10 --instances 48:148:0.3
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
RATIOS = {"0.3": (0.2, 0.4), "1": (0.8, 1.2)}
INSTANCES = ("32:132:0.3", "32:132:1", "40:140:0.3", "40:140:1", "48:148:0.3", "48:148:1", "64:164:0.3", "64:164:1",
             "32:332:0.3", "40:340:1", "48:348:0.3", "48:348:1", "56:356:0.3", "56:356:1", "64:364:0.3", "64:364:1")


def solve(problem, solver: str, limit: float, **options) -> tuple[diviml.Plan, float]:
    t0 = time.perf_counter()
    plan = diviml.solve(problem, solver, time_limit=limit, **options)
    seconds = time.perf_counter() - t0
    assert validate(plan, problem).ok, f"{solver} returned a plan the validator rejects"
    return plan, seconds


def row(instance: str, limit: float) -> str:
    """The table's row of ``instance``, written tasks:seed:ratio."""
    n, seed, label = instance.split(":")
    graph = random_dag(int(n), seed=int(seed), ccr=RATIOS[label])
    problem = diviml.Problem(graph, diviml.preset("paper-server"), diviml.Objective("latency"))
    heft, _ = solve(problem, "heft", limit)
    fresh, t0 = diviml.Problem(graph, problem.platform, problem.objective), time.perf_counter()  # nothing kept
    before = lower_bound(fresh)
    cells = [f"{graph.name}", label, f"{heft.objective:.6g}", f"{before:.6g} ({lower_bound_source(fresh)})",
             f"{time.perf_counter() - t0:.1f}"]
    plan, seconds = solve(problem, "exact", limit)
    cells += [f"{plan.objective:.6g}", f"{plan.bound:.6g} ({plan.bound_source})", f"{100 * plan.gap:.2f}%",
              plan.status, f"{seconds:.0f}", f"{plan.stats.get('probes', 0):.0f}"]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=30.0, help="seconds for each exact solve")
    ap.add_argument("--instances", nargs="+", default=list(INSTANCES), help="tasks:seed:ratio (ratio 0.3 or 1)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    header = ("| instance | comm. ratio | HEFT | bound before search | s | exact | its bound | its gap | status | s | "
              "cutoffs probed |\n|---|---|---|---|---|---|---|---|---|---|---|")
    print(header, flush=True)
    rows = []
    for instance in args.instances:
        rows.append(row(instance, args.limit))
        print(rows[-1], flush=True)
    command = "python benchmarks/random_bounds.py" + (f" --limit {args.limit:g}" if args.limit != 30 else "")
    if tuple(args.instances) != INSTANCES:
        command += " --instances " + " ".join(args.instances)
    text = (f"# Certified gaps on randomly wired DAGs: the energetic LP, then exact minimising and probing cutoffs\n\n"
            f"`{command}`\n\n{header}\n" + "\n".join(rows) + "\n\nPlatform paper-server; latency; each exact solve "
            f"given {args.limit:g} s on this 2-core machine: a third minimising, the rest on cutoffs above its bound "
            "where it is not proven (`CP-SAT cutoffs`: the largest makespan CP-SAT proved no schedule meets). "
            "CP-SAT's search is not deterministic under a time limit: plans and bounds move between runs.\n")
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
