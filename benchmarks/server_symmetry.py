"""Benchmark: symmetry breaking between identical servers (issue 26), on and off.

Exact (CP-SAT, one model: no decomposition) and the MILP (HiGHS) schedule layered DAGs for latency on
platforms of identical servers (each a host CPU and accelerators); the pipeline IP splits them for throughput.
Each problem is solved three ways at the same limit: no symmetry breaking (``--symmetry none``), identical
devices ordered (``tasks``, the default), identical devices and identical servers ordered (``tasks+servers``). Reported: the time to a
proven optimum (or the limit), status and value. Prints a table and writes it to
benchmarks/results/server_symmetry.md.

    python benchmarks/server_symmetry.py                # the committed table (about 15 min)
    python benchmarks/server_symmetry.py --limit 20 --sizes 20
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import diviml
from diviml.generators import layered_dag
from diviml.validate import validate

OUT = Path(__file__).parent / "results" / "server_symmetry.md"
WAYS = (("none", "none"), ("devices", "tasks"), ("devices + servers", "tasks+servers"))


def servers(count: int, gpus: int) -> diviml.Platform:
    """``count`` identical servers of a host CPU and ``gpus`` A100 on PCIe, joined by a 100 Gb/s network."""
    devices = []
    for s in range(count):
        devices += [{"name": f"s{s}cpu", "type": "cpu", "server": f"s{s}", "host": True},
                    {"name": f"s{s}gpu", "type": "a100", "server": f"s{s}", "count": gpus, "memory": 40e9,
                     "link": {"bandwidth": 16e9, "latency": 1e-5}}]
    return diviml.Platform.from_dict({"devices": devices, "network": {"bandwidth": 12.5e9, "latency": 1e-5}},
                                     origin=f"{count} servers of {gpus} GPUs")


def solve(problem, solver: str, way: tuple, limit: float) -> tuple[float, object]:
    name, criterion = way
    options = {"symmetry": criterion}
    if solver == "exact":
        options["decompose"] = False
    if solver in ("milp", "ip"):
        options["engine"] = "highs"
    started = time.perf_counter()
    plan = diviml.solve(problem, solver, time_limit=limit, **options)
    seconds = time.perf_counter() - started
    assert validate(plan, problem).ok, f"{solver} ({name}) returned a plan the validator rejects"
    return seconds, plan


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=float, default=60.0)
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 24])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    cases = [(f"{count} x (CPU + {gpus} A100)", servers(count, gpus)) for count, gpus in ((2, 2), (3, 2))]
    lines = ["| graph | platform | solver | objective | " + " | ".join(f"{w[0]}: time (s), status" for w in WAYS)
             + " | values agree |", "|" + "---|" * (5 + len(WAYS))]
    for n in args.sizes:
        for seed in args.seeds:
            graph = layered_dag(n, seed=seed, device_types=("cpu", "a100"), ccr=(0.05, 0.5))
            for label, platform in cases:
                for solver, objective in (("exact", "latency"), ("milp", "latency"), ("ip", "pipeline")):
                    problem = diviml.Problem(graph, platform, diviml.Objective(objective))
                    runs = [solve(problem, solver, way, args.limit) for way in WAYS]
                    values = [plan.objective for _, plan in runs]
                    proven = [plan.objective for _, plan in runs if plan.status == "optimal"]
                    agree = "yes" if max(proven, default=0) - min(proven, default=0) <= 1e-6 * max(values) else "NO"
                    row = (f"| layered {n} (seed {seed}) | {label} | {solver} | {objective} | "
                           + " | ".join(f"{s:.1f}, {p.status} ({p.objective:.5g})" for s, p in runs) + f" | {agree} |")
                    print(row, flush=True)
                    lines.append(row)
    text = ("# Symmetry breaking between identical servers\n\n"
            f"Command: `python benchmarks/server_symmetry.py --limit {args.limit:g} --sizes "
            f"{' '.join(map(str, args.sizes))} --seeds {' '.join(map(str, args.seeds))}` on the 2-core development "
            "machine. Layered DAGs (CPU and A100 costs, communication-to-computation 0.05-0.5); each solve at the "
            "same limit with no symmetry breaking, identical devices ordered by their number of tasks, and "
            "identical devices and servers ordered. Values agree: every proven optimum equal.\n\n"
            + "\n".join(lines) + "\n")
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
