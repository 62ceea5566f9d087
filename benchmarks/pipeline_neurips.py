"""Benchmark: pipelined max-load partitioning on the NeurIPS 2020 scenarios (issue: pipeline partitioning).

Every scenario file under ../shared/data/tarnawski2020/throughput-inputs, every method: one accelerator,
the human expert split (where one is published), greedy, local search, PipeDream chain DP, METIS
partitioner, the exact contiguous DP, and the IP contiguous and non-contiguous. Value, time, and the gap to
the method's proven bound; the DP is checked against the published contiguous optima. Prints a table and
writes benchmarks/results/pipeline_neurips.md.

    python benchmarks/pipeline_neurips.py              # IP 60 s, local search 10 s per run (~25 minutes)
    python benchmarks/pipeline_neurips.py --ip-limit 20 --ls-limit 5
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import diviml
from diviml import DivimlError, Objective
from diviml.frontends import neurips2020
from diviml.simulate import pipeline_loads

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tarnawski2020"
OUT = Path(__file__).parent / "results" / "pipeline_neurips.md"
REFERENCE = {  # published contiguous optima (shared/data/tarnawski2020/README.md)
    "LayerGraphs/bert24_inference": 17.78990625, "LayerGraphs/bert24_training": 41.7458125,
    "LayerGraphs/resnet50_inference": 33.774666015625, "LayerGraphs/resnet50_training": 78.63181250000001,
    "OperatorGraphs/bert_l-3_inference": 27.9185676799125, "OperatorGraphs/bert_l-3_training": 65.30314912208605,
    "OperatorGraphs/resnet50_inference": 124.34884977404485,
}


def one_accelerator(problem) -> float:
    acc = next(d.name for d in problem.platform.devices if d.type == neurips2020.ACCELERATOR)
    cpu = next(d.name for d in problem.platform.devices if d.type == neurips2020.CPU)
    placement = {t.id: acc if acc in problem.allowed_devices[t.id] else cpu for t in problem.graph.tasks}
    used = sum(problem.graph.by_id[t].memory_bytes for t, d in placement.items() if d == acc)
    if used > problem.platform.by_name[acc].memory_bytes:
        return math.inf
    return pipeline_loads(problem, placement).objective


def run(name: str, ip_limit: float, ls_limit: float) -> list[dict]:
    path = DATA / "throughput-inputs" / f"{name}.json"
    base = diviml.load_problem(path, objective=Objective("pipeline"))
    contiguous = replace(base, objective=Objective("pipeline", contiguous=True))
    rows = []

    def record(method, fn):
        t0 = time.perf_counter()
        try:
            value, bound, note = fn()
        except DivimlError as exc:
            value, bound, note = math.nan, math.nan, str(exc).split(":")[0]
        rows.append({"scenario": name, "method": method, "value": value, "bound": bound,
                     "time": time.perf_counter() - t0, "note": note})
        print(f"{name} {method}: {value:.6g} ({rows[-1]['time']:.1f} s) {note}", file=sys.stderr, flush=True)

    def plan_of(solver, problem, limit, **kw):
        def fn():
            plan = diviml.solve(problem, solver, time_limit=limit, **kw)
            return plan.objective, plan.bound, plan.status
        return fn

    record("one accelerator", lambda: (one_accelerator(base), math.nan, ""))
    stem = name.split("/")[1]
    expert = DATA / "human-experts" / f"{stem}_expert.json"
    if name.startswith("LayerGraphs") and expert.exists():
        record("human expert", lambda: (pipeline_loads(base, neurips2020.load_split(expert, base.graph, base.platform)
                                                       ).objective, math.nan, ""))
    record("greedy", plan_of("greedy", base, 10))
    record("local search", plan_of("local-search", base, ls_limit, seed=0))
    record("pipedream", plan_of("pipedream", contiguous, 300))
    record("partitioner", plan_of("partitioner", base, 30))
    record("dp (contiguous)", plan_of("dp", contiguous, 900))
    record("ip contiguous", plan_of("ip", contiguous, ip_limit, engine="highs"))
    record("ip non-contiguous", plan_of("ip", base, ip_limit, engine="highs"))
    return rows


def table(rows: list[dict]) -> str:
    out = ["| scenario | method | max-load | time (s) | gap to own bound | vs DP | status / note |",
           "|---|---|---|---|---|---|---|"]
    dp = {r["scenario"]: r["value"] for r in rows if r["method"] == "dp (contiguous)"}
    for r in rows:
        gap = "" if not (math.isfinite(r["bound"]) and r["value"] > 0) else f"{100 * (r['value'] - r['bound']) / r['value']:.2f}%"
        ref = dp.get(r["scenario"], math.nan)
        vs = f"{r['value'] / ref:.3f}x" if math.isfinite(r["value"]) and math.isfinite(ref) else ""
        note = r["note"]
        if r["method"] == "dp (contiguous)":
            want = REFERENCE.get(r["scenario"])
            note += f"; published {want!r}: " + ("matches (1e-6)" if want and abs(r["value"] - want) <= 1e-6 * want
                                                 else "DIFFERS")
        out.append(f"| {r['scenario']} | {r['method']} | {r['value']:.6g} | {r['time']:.2f} | {gap} | {vs} | {note} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ip-limit", type=float, default=60.0)
    ap.add_argument("--ls-limit", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    names = sorted(f"{p.parent.name}/{p.stem}" for p in (DATA / "throughput-inputs").glob("*/*.json"))
    rows = [r for name in names for r in run(name, args.ip_limit, args.ls_limit)]
    text = (f"# Pipelined max-load on the NeurIPS 2020 scenarios\n\nCommand: `python benchmarks/pipeline_neurips.py "
            f"--ip-limit {args.ip_limit:g} --ls-limit {args.ls_limit:g}`; machine: 2 cores. Times in the files' "
            "unit (ms, likely). 'vs DP' is max-load / the contiguous optimum: below 1 is what non-contiguity buys.\n\n"
            + table(rows))
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
