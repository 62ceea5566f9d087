"""Benchmark: our contiguous pipeline DP side by side with the authors' C++ DP (NeurIPS 2020).

Both programs run as separate processes on the same scenario files, one at a time: ours through the CLI
(`diviml schedule FILE --objective pipeline --contiguous --solver dp --json`), theirs as
`dp < FILE`. For each: the optimal max-load, ideals and ideal pairs, wall time of the whole process, peak
memory (resident set), and for ours also the solver's own time (the process adds Python start-up and
imports, about 1 s). Prints a table and writes benchmarks/results/pipeline_vs_authors.md.

The authors' program is not part of diviml. Build it yourself from msr-fiddle/dnn-partitioning
(throughput-dp/dp.cpp, MIT licence; it includes nlohmann/json.hpp, e.g. from `pip download nlohmann_json`):

    g++ -O3 -std=c++17 -I<dir holding nlohmann/json.hpp> -o dp dp.cpp
    python benchmarks/pipeline_vs_authors.py --authors-dp ./dp
    python benchmarks/pipeline_vs_authors.py --authors-dp ./dp --extra path/to/dnn-partitioning/throughput-inputs

Without --authors-dp only our columns are filled. --extra adds scenario files that ../shared does not hold
(their Inception-v3, GNMT, ...); files already in ../shared are not run twice.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tarnawski2020" / "throughput-inputs"
OUT = Path(__file__).parent / "results" / "pipeline_vs_authors.md"


def run_process(cmd: list[str], stdin_path: Path | None, timeout: float) -> dict:
    """Run cmd; wall time, peak resident memory (MB), exit status, stdout and stderr."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=stdin, stdout=out, stderr=err)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                status = -9
                break
            time.sleep(0.002)
        wall = time.perf_counter() - t0
        proc.returncode = 0  # reaped above; keep Popen from waiting again
        if stdin_path:
            stdin.close()
        out.seek(0)
        err.seek(0)
        return {"wall": wall, "peak_mb": usage.ru_maxrss / 1024, "status": status,
                "stdout": out.read().decode(errors="replace"), "stderr": err.read().decode(errors="replace")}


def ours(path: Path, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "diviml", "schedule", str(path), "--objective", "pipeline", "--contiguous",
           "--solver", "dp", "--json", "--time-limit", str(timeout)]
    r = run_process(cmd, None, timeout + 60)
    row = {"wall": r["wall"], "peak_mb": r["peak_mb"]}
    if r["status"] != 0:
        return {**row, "value": None, "note": (r["stderr"].strip().splitlines() or ["failed"])[-1][:80]}
    plan = json.loads(r["stdout"])
    return {**row, "value": plan["objective"], "solve": plan["solve_time_s"], "ideals": plan["stats"].get("ideals"),
            "pairs": plan["stats"].get("pairs"), "note": plan["status"]}


WARM = """
import sys, time
import diviml
from diviml import Objective
from diviml.solvers.pipeline import dp as pipeline_dp
problem = diviml.load_problem(sys.argv[1], objective=Objective("pipeline", contiguous=True))
times = []
for _ in range(2):
    t0 = time.perf_counter()
    pipeline_dp.solve(problem, time_limit=float(sys.argv[2]))
    times.append(time.perf_counter() - t0)
print(min(times))
"""


def warm(path: Path, timeout: float) -> float | None:
    """Our DP's solve time in a process whose compiled kernel is already loaded (best of two runs)."""
    r = run_process([sys.executable, "-c", WARM, str(path), str(timeout)], None, 3 * timeout + 60)
    return float(r["stdout"].strip()) if r["status"] == 0 else None


def theirs(binary: Path, path: Path, timeout: float) -> dict:
    r = run_process([str(binary)], path, timeout)
    row = {"wall": r["wall"], "peak_mb": r["peak_mb"]}
    ideals = re.search(r"^(\d+) ideals$", r["stderr"], re.M)
    pairs = re.search(r"^(\d+) ideal pairs$", r["stderr"], re.M)
    row.update(ideals=float(ideals.group(1)) if ideals else None, pairs=float(pairs.group(1)) if pairs else None)
    if r["status"] == -9:
        return {**row, "value": None, "note": f"killed after {timeout:g} s"}
    load = re.search(r'"maxLoad": ([0-9.eE+-]+)', r["stdout"])
    if r["status"] != 0 or not load:
        fail = re.search(r"FAIL: (.*)", r["stdout"] + r["stderr"])
        return {**row, "value": None, "note": fail.group(1)[:80] if fail else f"exit status {r['status']}"}
    return {**row, "value": float(load.group(1)), "note": "optimal"}


def scenarios(extra: Path | None) -> list[tuple[str, Path]]:
    found = {str(p.relative_to(DATA).with_suffix("")): p for p in sorted(DATA.glob("*/*.json"))}
    if not found:
        sys.exit(f"no scenario files under {DATA}: ../shared must sit beside the checkout")
    if extra:
        for p in sorted(extra.glob("*/*.json")):
            found.setdefault(str(p.relative_to(extra).with_suffix("")), p)
    return sorted(found.items())


def fmt(x, spec: str) -> str:
    return "" if x is None else format(x, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--authors-dp", type=Path, help="the authors' compiled dp binary")
    parser.add_argument("--extra", type=Path, help="folder of more scenario files (LayerGraphs/, OperatorGraphs/)")
    parser.add_argument("--only", help="run only scenarios whose name contains this")
    parser.add_argument("--out", type=Path, default=OUT, help=f"table file (default {OUT})")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per program and scenario, seconds")
    args = parser.parse_args()
    if args.authors_dp and not os.access(args.authors_dp, os.X_OK):
        sys.exit(f"--authors-dp {args.authors_dp}: not an executable file")
    rows = []
    for name, path in scenarios(args.extra):
        if args.only and args.only not in name:
            continue
        print(f"{name}: ours...", file=sys.stderr, flush=True)
        a = ours(path, args.timeout)
        if a.get("value") is not None:
            a["warm"] = warm(path, args.timeout)
        b = None
        if args.authors_dp:
            print(f"{name}: theirs...", file=sys.stderr, flush=True)
            b = theirs(args.authors_dp, path, args.timeout)
        rows.append((name, "shared" if path.is_relative_to(DATA) else "extra", a, b))
    header = ("| scenario | source | ideals (ours / theirs) | ideal pairs (ours / theirs) | max-load ours | max-load theirs "
              "| agree (1e-6) | ours: warm solve s | ours: solve in CLI s | ours: CLI process s | theirs: process s "
              "| ratio ours warm / theirs "
              "| peak MB ours / theirs |")
    lines = [
        "# Contiguous pipeline DP: ours beside the authors' C++ DP",
        "",
        f"Command: `python benchmarks/pipeline_vs_authors.py {' '.join(sys.argv[1:])}`; machine: "
        f"{os.cpu_count()} cores, one program at a time. 'ours: CLI process' includes Python start-up and imports; "
        "'ours: solve in CLI' includes loading the compiled kernel (about 0.25 s, once per process); 'ours: warm "
        "solve' is the same solve in a process that has it loaded (best of two). 'theirs: process' includes their "
        "JSON parsing. Ratio: our warm solve / their whole process.",
        "Our pair count is the pairs walked (pruned by a greedy plan's value); theirs is every ideal pair, built "
        "and stored before the DP.",
        "",
        header,
        "|" + "---|" * (header.count("|") - 1),
    ]
    for name, source, a, b in rows:
        b = b or {}
        agree = ""
        if a.get("value") is not None and b.get("value") is not None:
            agree = "yes" if abs(a["value"] - b["value"]) <= 1e-6 * abs(b["value"]) else "NO"
        ratio = a["warm"] / b["wall"] if a.get("warm") is not None and b.get("value") is not None else None
        lines.append(
            f"| {name} | {source} | {fmt(a.get('ideals'), '.0f')} / {fmt(b.get('ideals'), '.0f')} "
            f"| {fmt(a.get('pairs'), '.3g')} / {fmt(b.get('pairs'), '.3g')} "
            f"| {fmt(a.get('value'), '.10g') or a['note']} | {fmt(b.get('value'), '.10g') or b.get('note', 'not run')} "
            f"| {agree} | {fmt(a.get('warm'), '.3f')} | {fmt(a.get('solve'), '.3f')} | {a['wall']:.2f} | {fmt(b.get('wall'), '.3f')} "
            f"| {fmt(ratio, '.2f')} | {a['peak_mb']:.0f} / {fmt(b.get('peak_mb'), '.0f')} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
