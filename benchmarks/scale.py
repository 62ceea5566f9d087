"""Benchmark: time limits kept at scale (issue 24). Layered DNN-like DAGs of 1k-50k tasks on paper-server
(task memory scaled so the whole graph takes half of the platform's memory), each solver run as the CLI runs
it, in a process of its own: wall time (load, solve, validate, write), peak memory, whether the time limit was
held (wall time at most limit x 1.1 + 5 s of start-up), status and gap; then the growth exponent of each
solver's wall time in N where it was not cut by the limit. Writes benchmarks/results/scale.md.

    python benchmarks/scale.py                        # N = 1k, 5k, 20k, 50k; --time-limit 30 (about 25 minutes)
    python benchmarks/scale.py --sizes 1000 5000 --solvers heft split
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import diviml
from diviml.generators import layered_dag

OUT = Path(__file__).parent / "results" / "scale.md"
SOLVERS = ("heft", "split", "exact", "dp")
# the CLI in a child of a child that reports the CLI's peak resident set (its own or its largest worker's)
PEAK = """import resource, subprocess, sys
status = subprocess.call([sys.executable, "-m", "diviml", *sys.argv[1:]])
print("peak-kib", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(status)
"""


def graph_file(n: int, folder: Path) -> Path:
    graph = layered_dag(n, seed=0)
    platform = diviml.preset("paper-server")
    held = sum(d.memory_bytes for d in platform.devices)
    total = sum(t.memory_bytes for t in graph.tasks)
    data = graph.to_dict()
    for task in data["tasks"]:
        task["memory_bytes"] *= 0.5 * held / total
    path = folder / f"layered-{n}.json"
    path.write_text(json.dumps(data))
    return path


def run(path: Path, solver: str, limit: float, folder: Path) -> dict:
    """One CLI run in a child process: its wall time, peak memory, and what it printed."""
    objective = ["--objective", "pipeline"] if solver == "dp" else []
    out = folder / f"{path.stem}-{solver}.plan.json"
    argv = ["diviml", "schedule", str(path), "--solver", solver, *objective, "--time-limit", str(limit), "--json",
            "--quiet", "--out", str(out)]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", PEAK, *argv], capture_output=True, text=True, timeout=limit * 10 + 120)
    wall = time.perf_counter() - t0
    peak_line = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    peak = float(peak_line.split()[1]) / 1024 if peak_line.startswith("peak-kib") else float("nan")
    r.stderr = r.stderr.rsplit("peak-kib", 1)[0]
    row = {"solver": solver, "wall_s": wall, "peak_mb": peak, "held": wall <= limit * 1.1 + 5, "exit": r.returncode}
    if r.returncode == 0:
        result = json.loads(r.stdout)
        row.update(status=result["status"], gap=result["gap"], objective=result["objective"])
        v = subprocess.run([sys.executable, "-m", "diviml", "validate", str(path), str(out), "--json"],
                           capture_output=True, text=True)
        row["valid"] = v.returncode == 0 and json.loads(v.stdout)["valid"]
    else:
        row.update(status=f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1][:80] if r.stderr else ''}",
                   gap=float("nan"), valid=False)
    return row


def exponent(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(wall time) against log(N)."""
    if len(points) < 2:
        return float("nan")
    xs, ys = [math.log(n) for n, _ in points], [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 20000, 50000])
    ap.add_argument("--solvers", nargs="+", default=list(SOLVERS), choices=SOLVERS)
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    head = "| N | solver | wall s | limit held | peak MB | status | gap | valid |"
    lines = [f"# Time limits at scale: layered DAGs on paper-server, --time-limit {args.time_limit:g}", "",
             "Each run is the CLI in a process of its own (load, solve, write; the plan is then validated by a second "
             "process); 'limit held': wall "
             f"time at most {args.time_limit * 1.1 + 5:g} s (the limit x 1.1 + 5 s of start-up). Peak MB: the "
             "run's largest resident set (the CLI process or its largest worker).", "", head, "|" + "---|" * (head.count("|") - 1)]
    print("\n".join(lines), flush=True)
    walls: dict[str, list[tuple[int, float]]] = {s: [] for s in args.solvers}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for n in args.sizes:
            path = graph_file(n, folder)
            for solver in args.solvers:
                row = run(path, solver, args.time_limit, folder)
                if row["wall_s"] < args.time_limit * 0.9:
                    walls[solver].append((n, row["wall_s"]))
                line = (f"| {n} | {solver} | {row['wall_s']:.1f} | {'yes' if row['held'] else 'NO'} | "
                        f"{row['peak_mb']:.0f} | {row['status']} | {row['gap']:.2%} | {row['valid']} |")
                print(line, flush=True)
                lines.append(line)
    lines += ["", "Growth of wall time in N (runs that ended before 90% of the limit): " + ", ".join(
        f"{s} N^{exponent(p):.2f}" for s, p in walls.items() if len(p) > 1), "",
        "Reproduce: `python benchmarks/scale.py" + (f" --time-limit {args.time_limit:g}" if args.time_limit != 30 else "")
        + "`"]
    print("\n".join(lines[-3:]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
