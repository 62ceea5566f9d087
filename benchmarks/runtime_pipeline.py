"""Benchmark: pipeline plans run as streams of requests on this machine's devices, measured beside what they
predicted (their largest device load per request).

For each model: profile it for the platform (`diviml profile`), schedule a pipeline with the DP (contiguous
stages) and with the IP (any placement), and run each plan as a stream (`diviml run --compare`: its time per
request in the stream's steady state, and the best single device's pipeline plan, one device running the
requests one after another, measured beside it in the same process, their runs in turn). The same placement is
also run as a latency plan, one request at a time (its start times from the simulator), which is what the
stream would cost without pipelining. Outputs are checked on every request of every run. Prints a table and
writes benchmarks/results/runtime_pipeline.md (or --out).

    python benchmarks/runtime_pipeline.py
    python benchmarks/runtime_pipeline.py --models resnet18 --platforms cpu-ranks-2     # two gloo ranks
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "runtime"))
from runtime_fidelity import diviml  # noqa: E402  (a command's --json answer)
from test_run import plan_from_placement  # noqa: E402  (a placement timed by the simulator: a latency plan)

OUT = Path(__file__).parent / "results" / "runtime_pipeline.md"
MODELS = ["resnet18", "googlenet", "resnet50", "inception_v3", "randwire-ws-s0", "gpt2-small", "gpt-tiny"]
SOLVES = {"dp (contiguous)": ["--solver", "dp", "--contiguous"], "ip": ["--solver", "ip"]}
RANKS = {"cpu-ranks-2": 2}  # platforms run as one rank per device


def one_at_a_time(plan_path: Path, graph_path: Path, platform: str, out: Path) -> Path:
    """The pipeline plan's placement as a latency plan: its tasks started as the simulator times one request."""
    from diviml import Objective, Plan, Problem, TaskGraph
    from diviml.platform import Platform
    plan = Plan.load(plan_path)
    problem = Problem(TaskGraph.load(graph_path), Platform.load(platform), Objective("latency"))
    plan_from_placement(problem, plan.placement, f"{plan.solver} placement").save(out)
    return out


def rows_for(model: str, platform: str, work: Path, repeats: int, min_time: float) -> list[dict]:
    g = work / f"{model}-{platform}.json"
    diviml("profile", model, "--platform", platform, "--out", g, "--min-time", min_time)
    nproc = RANKS.get(platform, 1)
    ranks = ["--nproc", nproc] if nproc > 1 else []
    out = []
    for label, solve in SOLVES.items():
        plan = work / f"{model}-{platform}-{solve[1]}.json"
        diviml("schedule", g, "--platform", platform, "--objective", "pipeline", *solve, "--time-limit", 60,
               "--out", plan)
        common = ["--platform", platform, "--graph", g, "--repeats", repeats]
        stream = diviml("run", model, plan, *common, *(ranks or ["--compare"]))
        if ranks:  # --compare runs in one process: the best single device's plan on its own
            single_plan = work / f"{model}-{platform}-single.json"
            diviml("schedule", g, "--platform", platform, "--objective", "pipeline", "--solver", "best-device",
                   "--out", single_plan)
            single = diviml("run", model, single_plan, *common, *ranks)
            stream.update(single_measured_s=single["measured_s"], single_outputs_match=single["outputs_match"])
        latency_plan = one_at_a_time(plan, g, platform, work / f"{model}-{platform}-{solve[1]}-latency.json")
        alone = diviml("run", model, latency_plan, *common, *ranks)
        out.append({"model": model, "platform": platform + (f" ({nproc} ranks)" if nproc > 1 else ""),
                    "plan": label, "pieces": stream["pieces"], "requests": stream["requests"],
                    "predicted": stream["predicted_s"], "measured": stream["measured_s"], "ratio": stream["ratio"],
                    "alone": alone["measured_s"], "single": stream["single_measured_s"],
                    "speedup": stream["single_measured_s"] / stream["measured_s"],
                    "match": stream["outputs_match"] and alone["outputs_match"] and stream["single_outputs_match"]})
        r = out[-1]
        print(f"  {model} {r['platform']} {label}: {r['pieces']} pieces, {r['requests']} requests, predicted {r['predicted'] * 1e3:.3f} ms, "
              f"measured {r['measured'] * 1e3:.3f} ms a request, one at a time {r['alone'] * 1e3:.3f}, single "
              f"device {r['single'] * 1e3:.3f} ({r['speedup']:.2f}x)", flush=True)
    return out


def table(rows: list[dict], command: str) -> str:
    lines = ["# Pipeline plans run as streams of requests", "",
             f"`{command}` ({time.strftime('%Y-%m-%d')}; this machine: 2 cores, shared, noisy). Times are per "
             "request, medians of the timed runs. *Predicted*: the plan's largest device load. *Measured*: the "
             "stream's time per request in its steady state (`diviml run`). *One at a time*: the same placement "
             "run as a latency plan, a request after the last has ended. *Single*: the best single device's "
             "pipeline plan, measured beside the stream in the same process (on ranks: run on its own). "
             "*Speed-up*: single / measured.", "",
             "| model | platform | plan | pieces | requests | predicted (ms) | measured (ms) | ratio "
             "| one at a time (ms) | single device (ms) | speed-up | outputs match |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['platform']} | {r['plan']} | {r['pieces']} | {r['requests']} "
                     f"| {r['predicted'] * 1e3:.3f} | {r['measured'] * 1e3:.3f} | {r['ratio']:.3f} "
                     f"| {r['alone'] * 1e3:.3f} | {r['single'] * 1e3:.3f} | {r['speedup']:.2f}x "
                     f"| {'yes' if r['match'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--platforms", nargs="+", default=["cpu-workers-2"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.5, help="profile: least seconds timed per operator")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            for platform in args.platforms:
                rows += rows_for(model, platform, Path(tmp), args.repeats, args.min_time)
    text = table(rows, "python benchmarks/runtime_pipeline.py " + " ".join(sys.argv[1:]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
