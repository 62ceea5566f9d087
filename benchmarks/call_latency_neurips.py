"""Benchmark: single-request latency under the NeurIPS 2020 call model (issue: pipeline partitioning, item 5).

Every scenario under ../shared/data/tarnawski2020/latency-inputs, q = 1 and 2 calls per accelerator, every
method that handles the objective: best device, greedy, and the exact CP-SAT model (call-exact). Value,
time, the gap to call-exact's proven bound, and each value against call-exact's. Prints a table and writes
benchmarks/results/call_latency_neurips.md.

    python benchmarks/call_latency_neurips.py                   # call-exact 60 s per run (~6 minutes)
    python benchmarks/call_latency_neurips.py --limit 20 --calls 1
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import diviml
from diviml import Objective

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tarnawski2020" / "latency-inputs"
OUT = Path(__file__).parent / "results" / "call_latency_neurips.md"
METHODS = ("best-device", "greedy", "call-exact")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=float, default=60.0, help="time limit of call-exact, seconds")
    ap.add_argument("--calls", default="1,2", help="values of q, comma-separated")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    lines = ["| scenario | q | method | latency | time (s) | gap to bound | vs call-exact | status / note |",
             "|---|---|---|---|---|---|---|---|"]
    for path in sorted(DATA.glob("*/*.json")):
        name = f"{path.parent.name}/{path.stem}"
        for q in (int(c) for c in args.calls.split(",")):
            problem = diviml.load_problem(path, objective=Objective("call-latency", max_calls=q))
            plans = {}
            for method in METHODS:
                t0 = time.perf_counter()
                plan = diviml.solve(problem, method, time_limit=args.limit if method == "call-exact" else 10)
                plans[method] = (plan, time.perf_counter() - t0)
            bound = plans["call-exact"][0].bound
            for method, (plan, seconds) in plans.items():
                gap = (plan.objective - bound) / plan.objective if plan.objective > 0 else 0.0
                vs = plan.objective / plans["call-exact"][0].objective
                note = plan.status + (f"; {plan.notes[-1]}" if plan.notes else "")
                lines.append(f"| {name} | {q} | {method} | {plan.objective:.6g} | {seconds:.2f} | {100 * gap:.2f}% | "
                             f"{vs:.3f}x | {note} |")
                print(lines[-1], flush=True)
    text = (f"# Latency under the NeurIPS 2020 call model\n\nCommand: `python benchmarks/call_latency_neurips.py "
            f"--limit {args.limit:g} --calls {args.calls}`; machine: 2 cores. Times in the files' unit (ms, likely). "
            "Gap: to call-exact's proven bound (the same bound for every method of a row group).\n\n"
            + "\n".join(lines) + "\n")
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
