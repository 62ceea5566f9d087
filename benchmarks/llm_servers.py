"""Benchmark: a large language model over several heterogeneous servers (issue 26).

GPT-3 175B and Llama 2 70B (``frontends/llm.py``: prefills of 2,048 tokens at batch 1, and GPT-3's decoding
step for 32 requests over a 2,048-token KV cache; FP32, and GPT-3's prefill in BF16 too; costed by the
roofline on meta tensors: nothing allocated) on the cluster presets ``six-servers``, ``a100-ib-2x8``
and ``h100-nvlink-8``; objectives prefill latency and pipelined throughput (max-load: the slowest stage's
time, whose inverse is requests per second). For each: the default solver, HEFT (latency) and the two
baselines people use, the Megatron/DeepSpeed uniform split (equal layers per accelerator) and the
memory-proportional split (the pipeline DP sits out: it needs transfers staged through one host); solve
time, value, bound and gap (to the best bound any of them proved), and the fullest device's and server's
memory. Prints a table and writes it to benchmarks/results/llm_servers.md.

    python benchmarks/llm_servers.py                 # every preset, both objectives, 60 s per solve
    python benchmarks/llm_servers.py --platforms six-servers --objectives latency --limit 30
    python benchmarks/llm_servers.py --workloads gpt3-175b-decode --platforms six-servers
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import diviml
from diviml.errors import DivimlError
from diviml.graph import TaskGraph
from diviml.validate import validate

OUT = Path(__file__).parent / "results" / "llm_servers.md"
CACHE = Path.home() / ".cache" / "diviml" / "benchmark-graphs"
PLATFORMS = ("six-servers", "a100-ib-2x8", "h100-nvlink-8")
SOLVERS = {"latency": ("auto", "heft", "uniform", "memory-split"),
           "pipeline": ("auto", "uniform", "memory-split")}


# (model, phase, batch, context, dtype): prefills of 2,048 tokens and one decoding step of 32 requests
WORKLOADS = {"gpt3-175b": ("gpt3-175b", "prefill", 1, None, "fp32"),
             "gpt3-175b-bf16": ("gpt3-175b", "prefill", 1, None, "bf16"),
             "llama2-70b": ("llama2-70b", "prefill", 1, None, "fp32"),
             "gpt3-175b-decode": ("gpt3-175b", "decode", 32, 2048, "fp32")}


def model_graph(workload: str) -> TaskGraph:
    """The workload's graph with analytic costs (cached: capturing GPT-3 on meta tensors takes about 2 minutes)."""
    from diviml.catalogue import CATALOGUE
    from diviml.frontends import zoo
    from diviml.frontends.pytorch import profile
    name, phase, batch, context, dtype = WORKLOADS[workload]
    spec = zoo.llm_spec(name, phase, context=context or 2048, batch=batch, dtype=dtype)
    path = CACHE / f"{spec.name}-llm.json"
    if path.exists():
        return TaskGraph.from_dict(json.loads(path.read_text()))
    graph = profile(spec.build, spec.inputs, name=spec.name, batches=(batch,), measured_type=None,
                    analytic_types=list(CATALOGUE), repeats=1)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(graph.to_dict()))
    return graph


def memory_use(plan, problem) -> tuple[float, float]:
    """The fullest device's and the fullest server's share of their memory under ``plan``."""
    used: dict[str, float] = {}
    for a in plan.assignments:
        used[a.device] = used.get(a.device, 0.0) + problem.graph.by_id[a.task].memory_bytes
    devices = problem.platform.by_name
    device_share = max(used[d] / devices[d].memory_bytes for d in used)
    servers: dict[str, list[float]] = {}
    for d in devices.values():
        held = servers.setdefault(d.server, [0.0, 0.0])
        held[0] += used.get(d.name, 0.0)
        held[1] += d.memory_bytes
    return device_share, max(u / c for u, c in servers.values())


def run(graph: TaskGraph, platform: str, objective: str, limit: float) -> list[dict]:
    rows = []
    for solver in SOLVERS[objective]:
        problem = diviml.Problem(graph, diviml.preset(platform), diviml.Objective(objective))
        t0 = time.perf_counter()
        try:
            plan = diviml.solve(problem, solver, time_limit=limit)
        except DivimlError as exc:
            rows.append({"solver": solver, "error": str(exc)})
            continue
        seconds = time.perf_counter() - t0
        assert validate(plan, problem).ok, f"{solver} returned a plan the validator rejects"
        device_share, server_share = memory_use(plan, problem)
        chosen = next((n.split(":")[0].removeprefix("auto chose ") for n in plan.notes if n.startswith("auto")), "")
        rows.append({"solver": solver + (f" ({chosen})" if chosen else ""), "value": plan.objective,
                     "bound": plan.bound, "source": plan.bound_source, "status": plan.status, "time": seconds,
                     "device_memory": device_share, "server_memory": server_share,
                     "devices": len({a.device for a in plan.assignments})})
    return rows


def table(results: dict) -> list[str]:
    lines = ["| workload and platform | objective | solver | value (s) | time (s) | bound (source) | gap to best bound | "
             "vs uniform | devices used | fullest device / server memory | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (platform, objective), rows in results.items():
        solved = [r for r in rows if "value" in r]
        best_bound = max((r["bound"] for r in solved), default=0.0)
        uniform = next((r["value"] for r in solved if r["solver"] == "uniform"), None)
        for r in rows:
            if "value" not in r:
                lines.append(f"| {platform} | {objective} | {r['solver']} | - | - | - | - | - | - | - | "
                             f"{r['error'][:90]} |")
                continue
            versus = f"{uniform / r['value']:.2f}x" if uniform else "-"
            lines.append(f"| {platform} | {objective} | {r['solver']} | {r['value']:.4g} | {r['time']:.1f} | "
                         f"{r['bound']:.4g} ({r['source']}) | {(r['value'] - best_bound) / r['value']:.1%} | "
                         f"{versus} | {r['devices']} | {r['device_memory']:.0%} / {r['server_memory']:.0%} | "
                         f"{r['status']} |")
    return lines


def merged(lines: list[str]) -> list[str]:
    """The table's rows over those of the file's earlier runs: a row group (workload on platform, objective)
    run now replaces the earlier one in place; the others stay, new groups go last."""
    def group(row: str) -> tuple[str, str]:
        cells = row.split("|")
        return cells[1].strip(), cells[2].strip()

    header, new_rows = lines[:2], lines[2:]
    old_rows = [r for r in OUT.read_text().splitlines() if r.startswith("| ") and not r.startswith("| workload")
                and not r.startswith("|---")] if OUT.exists() else []
    fresh: dict[tuple[str, str], list[str]] = {}
    for row in new_rows:
        fresh.setdefault(group(row), []).append(row)
    out, placed = [], set()
    for row in old_rows:
        key = group(row)
        if key not in fresh:
            out.append(row)
        elif key not in placed:
            out += fresh[key]
            placed.add(key)
    out += [row for key, rows in fresh.items() if key not in placed for row in rows]
    return header + out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platforms", default=",".join(PLATFORMS))
    parser.add_argument("--objectives", default="latency,pipeline")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds per solve")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    args = parser.parse_args()
    results, sizes = {}, []
    for workload in args.workloads.split(","):
        t0 = time.perf_counter()
        graph = model_graph(workload)
        sizes.append(f"{workload}: {len(graph)} tasks, {sum(t.memory_bytes for t in graph.tasks) / 1e9:.0f} GB "
                     f"resident")
        print(f"{sizes[-1]}, ready in {time.perf_counter() - t0:.1f} s", flush=True)
        for platform in args.platforms.split(","):
            for objective in args.objectives.split(","):
                key = (f"{workload} on {platform}", objective)
                results[key] = run(graph, platform, objective, args.limit)
                print("\n".join(table({key: results[key]})[2:]), flush=True)
    command = " ".join(["python benchmarks/llm_servers.py", f"--limit {args.limit:g}"] + [
        f"--{name} {getattr(args, name)}" for name in ("platforms", "objectives", "workloads")
        if getattr(args, name) != parser.get_default(name)])
    lines = ["# Language models over several servers", "",
             f"Command: `{command}` on the 2-core development machine (row groups it does not name are kept from "
             f"the file's earlier runs); {'; '.join(sizes)} (analytic costs; FP32 but the -bf16 workload). Value: the phase's latency (latency) or the "
             "slowest stage's time (pipeline), seconds. Gap: to the best bound of the row group. vs uniform: the "
             "uniform split's value over this plan's (above 1: better). Memory: the fullest device's and "
             "server's share of what they hold. Symmetry between identical servers, on and off: "
             "results/server_symmetry.md.", ""] + merged(table(results))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
