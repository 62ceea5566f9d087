"""Benchmark: exact latency scheduling on random DNN-like DAGs (issue: exact scheduling).

N = 20, 40, 80, 160, 320 tasks; K = 2, 3, 4 heterogeneous devices (a CPU and different GPUs); 3 seeds;
60 s per solve. For each instance: `exact` (CP-SAT, piece by piece between series points where that is
exact) time and status, the same CP-SAT model on the whole graph (`--no-decompose`), `milp` (HiGHS) for
N <= --milp-max-n, HEFT and best-device values, and the gains of `exact` over them. Prints a table and
writes it to benchmarks/results/exact_latency.md.

    python benchmarks/exact_latency.py               # the full run (about 30-40 minutes on 2 cores)
    python benchmarks/exact_latency.py --quick       # N = 20, 40; K = 2, 3; one seed
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import diviml
from diviml.generators import benchmark_device_types, benchmark_platform, layered_dag
from diviml.validate import validate

OUT = Path(__file__).parent / "results" / "exact_latency.md"


def run(n: int, k: int, seed: int, limit: float, milp: bool) -> dict:
    problem = diviml.Problem(layered_dag(n, seed=seed, device_types=benchmark_device_types(k)), benchmark_platform(k))
    row = {"N": n, "K": k, "seed": seed}
    for name in ("heft", "best-device"):
        row[name] = diviml.solve(problem, name, time_limit=limit).objective
    t0 = time.perf_counter()
    plan = diviml.solve(problem, "exact", time_limit=limit)
    row.update(exact=plan.objective, exact_s=time.perf_counter() - t0, exact_status=plan.status, exact_gap=plan.gap,
               exact_valid=validate(plan, problem).ok, pieces=int(plan.stats.get("modules", 1)))
    t0 = time.perf_counter()
    whole = diviml.solve(problem, "exact", time_limit=limit, decompose=False)
    row.update(whole=whole.objective, whole_s=time.perf_counter() - t0, whole_status=whole.status,
               whole_gap=whole.gap, whole_valid=validate(whole, problem).ok)
    if milp:
        t0 = time.perf_counter()
        m = diviml.solve(problem, "milp", time_limit=limit, engine="highs")
        row.update(milp=m.objective, milp_s=time.perf_counter() - t0, milp_status=m.status, milp_gap=m.gap,
                   milp_valid=validate(m, problem).ok)
    return row


def table(rows: list[dict]) -> str:
    head = ("| N | K | seed | pieces | exact (s) | status | gap | whole model (s) | status | gap | milp HiGHS (s) | "
            "status | gap | agree | vs HEFT | vs best device | valid |\n" + "|---" * 17 + "|\n")
    lines = []
    for r in rows:
        milp = "milp" in r
        proven = [r[s] for s in ("exact", "whole", "milp") if r.get(f"{s}_status") == "optimal"]
        agree = ""
        if len(proven) > 1:
            agree = "yes" if max(proven) - min(proven) <= 1e-5 * min(proven) else "NO"
        valid = r["exact_valid"] and r["whole_valid"] and r.get("milp_valid", True)
        lines.append(
            f"| {r['N']} | {r['K']} | {r['seed']} | {r['pieces']} | {r['exact_s']:.2f} | {r['exact_status']} | "
            f"{100 * r['exact_gap']:.3f}% | {r['whole_s']:.2f} | {r['whole_status']} | {100 * r['whole_gap']:.3f}% | "
            + (f"{r['milp_s']:.2f} | {r['milp_status']} | {100 * r['milp_gap']:.2f}% | " if milp else "- | - | - | ")
            + f"{agree} | {100 * (1 - r['exact'] / r['heft']):.1f}% | {100 * (1 - r['exact'] / r['best-device']):.1f}% | "
            + f"{'yes' if valid else 'NO'} |")
    return head + "\n".join(lines) + "\n"


def summary(rows: list[dict]) -> str:
    out = []
    for n in sorted({r["N"] for r in rows}):
        rs = [r for r in rows if r["N"] == n]
        proven = [r for r in rs if r["exact_status"] == "optimal"]
        out.append(f"- N = {n}: exact proved {len(proven)}/{len(rs)} optimal, max time "
                   f"{max(r['exact_s'] for r in rs):.1f} s, max final gap {100 * max(r['exact_gap'] for r in rs):.3f}%, "
                   f"mean gain over HEFT {100 * sum(1 - r['exact'] / r['heft'] for r in rs) / len(rs):.1f}%; "
                   f"whole model: {sum(r['whole_status'] == 'optimal' for r in rs)}/{len(rs)} proven, max time "
                   f"{max(r['whole_s'] for r in rs):.1f} s, max final gap {100 * max(r['whole_gap'] for r in rs):.3f}%")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--limit", type=float, default=60.0)
    ap.add_argument("--milp-max-n", type=int, default=80)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    sizes, ks, seeds = ((20, 40), (2, 3), (0,)) if args.quick else ((20, 40, 80, 160, 320), (2, 3, 4), (0, 1, 2))
    rows = []
    for n in sizes:
        for k in ks:
            for seed in seeds:
                r = run(n, k, seed, args.limit, n <= args.milp_max_n)
                rows.append(r)
                print(f"N={n} K={k} seed={seed}: exact {r['exact_status']} in {r['exact_s']:.1f} s"
                      + (f", milp {r['milp_status']} in {r['milp_s']:.1f} s" if "milp" in r else ""),
                      file=sys.stderr, flush=True)
    text = (f"# Exact latency scheduling (random DNN-like DAGs, {args.limit:g} s per solve)\n\n"
            f"Command: `python benchmarks/exact_latency.py{' --quick' if args.quick else ''}`; machine: 2 cores.\n"
            f"`milp` (HiGHS) run for N <= {args.milp_max_n}. Gains are (1 - exact / baseline). `pieces`: how many "
            "pieces exact solved between series points (1: the whole graph as one model); `whole model`: the same "
            "CP-SAT model on the whole graph (`--no-decompose`); `agree`: every proven optimum equal to 1e-5.\n\n"
            + table(rows) + "\n" + summary(rows))
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
