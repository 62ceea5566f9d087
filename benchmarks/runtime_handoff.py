"""Benchmark: plans solved for cpu-workers-2 with and without the hand-offs its workers pay, run here.

For each model (and objective): one profile on ``cpu-workers-2``, then for each platform: the preset with its
hand-offs set to 0 (a crossing between the workers free, as the preset was before session 73); the preset's
hand-offs (``handoff`` on each worker, half of what `benchmarks/runtime_crossing.py` measured a crossing at) as
delays (``transfers: overlapped``, as session 73 priced them); and the preset itself, whose receiving worker
spends each crossing (``transfers: receiver``, how the runtime runs): schedule with ``split``, run the plan with
the best single worker's plan measured beside it in the same process, their runs in turn (``diviml run
--compare``). Every step is the CLI a user runs. No calibration: this
is what a first solve predicts and what it measures. Prints a table and writes
benchmarks/results/runtime_handoff.md (or --out).

Columns: the plan's pieces (runs of tasks on one device), its predicted and measured time (ms, median of the
timed runs), measured / predicted, the single worker's predicted and measured time and the plan's speed-up over
it (above 1: splitting paid here).

    python benchmarks/runtime_handoff.py                       # the table (about 25 minutes)
    python benchmarks/runtime_handoff.py --models gpt-tiny --repeats 10

(Session 73's ``--receiver-busy`` re-timed the preset's plans with crossings as the receiver's time, by hand:
benchmarks/results/runtime_receiver_busy.md. The simulator times them so now, on the preset itself.)
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import yaml

from diviml import preset

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from conftest import workers_without_handoffs  # noqa: E402  (cpu-workers-2 with crossings free)
from runtime_fidelity import diviml  # noqa: E402  (a command's --json answer)

OUT = Path(__file__).parent / "results" / "runtime_handoff.md"
# (model, objective, batch): models of small operators, where crossings cost most beside their work, and larger
CASES = [("randwire-ws-s0", "latency", 1), ("gpt-tiny", "latency", 1), ("googlenet", "latency", 1),
         ("resnet50", "latency", 1), ("inception_v3", "latency", 1), ("randwire-ws-s0", "batch", 8),
         ("gpt-tiny", "batch", 8), ("googlenet", "batch", 8)]


def rows_of(model: str, objective: str, batch: int, platforms: dict[str, Path | str], work: Path, args) -> list[dict]:
    """One row per platform: the split plan solved for it, run beside the best single worker."""
    graph = work / f"{model}-{batch}.json"
    if not graph.exists():
        batches = ",".join(str(b) for b in (1, 2, 4, 8) if b <= batch)
        diviml("profile", model, "--platform", "cpu-workers-2", "--batch", batches, "--min-time", args.min_time,
               "--out", graph)
    how = ["--objective", "batch", "--batch", batch] if objective == "batch" else []
    out = []
    for label, platform in platforms.items():
        plan = work / f"{model}-{objective}-{label}.plan.json"
        diviml("schedule", graph, "--platform", platform, "--solver", "split", "--time-limit", args.time_limit,
               *how, "--out", plan)
        run = diviml("run", model, plan, "--graph", graph, "--platform", platform, "--compare",
                     "--repeats", args.repeats, "--warmup", 3, *(["--batch", batch] if objective == "batch" else []))
        out.append({"model": model, "case": objective if objective == "latency" else f"batch {batch}",
                    "platform": label, "pieces": run["pieces"], "predicted_s": run["predicted_s"],
                    "measured_s": run["measured_s"], "single_predicted_s": run["single_predicted_s"],
                    "single_s": run["single_measured_s"], "speedup": run["speedup"],
                    "match": run["outputs_match"]})
        r = out[-1]
        print(f"  {model} {r['case']} {label}: {r['pieces']} pieces, predicted {r['predicted_s'] * 1e3:.3f} ms, "
              f"measured {r['measured_s'] * 1e3:.3f} ms, single {r['single_s'] * 1e3:.3f} ms", flush=True)
    return out


def table(rows: list[dict], command: str) -> str:
    lines = ["# Plans solved with and without the workers' hand-offs, run on cpu-workers-2", "",
             f"Command: `{command}`; this shared 2-core machine, one run. Each model profiled once; `split` solved "
             "for each platform; each plan run beside the best single worker's plan in one process, their runs in "
             "turn (`diviml run --compare`). Times in ms, medians of the timed runs.", "",
             "| model | objective | platform | pieces | predicted | measured | measured / predicted | single worker "
             "predicted | single worker measured | speed-up | outputs |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['case']} | {r['platform']} | {r['pieces']} | "
                     f"{r['predicted_s'] * 1e3:.3f} | {r['measured_s'] * 1e3:.3f} | "
                     f"{r['measured_s'] / r['predicted_s']:.2f} | {r['single_predicted_s'] * 1e3:.3f} | "
                     f"{r['single_s'] * 1e3:.3f} | {r['speedup']:.2f} | "
                     f"{'match' if r['match'] else 'DIFFER'} |")
    lines += ["", "Geometric means over the rows of each platform:", ""]
    for label in dict.fromkeys(r["platform"] for r in rows):
        mine = [r for r in rows if r["platform"] == label]
        ratio = _geometric_mean([r["measured_s"] / r["predicted_s"] for r in mine])
        speedup = _geometric_mean([r["speedup"] for r in mine])
        pieces = _geometric_mean([r["pieces"] for r in mine])
        lines.append(f"- {label}: measured / predicted {ratio:.2f}, speed-up over the single worker {speedup:.2f}, "
                     f"pieces {pieces:.0f} ({len(mine)} rows)")
    return "\n".join(lines) + "\n"


def _geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", help="only these models' cases")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--time-limit", type=float, default=10.0, help="split's time limit, seconds")
    ap.add_argument("--min-time", type=float, default=0.2, help="the profile's time per operator, seconds")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    command = "python benchmarks/runtime_handoff.py" + (" " + " ".join(argv or sys.argv[1:])).rstrip()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as where:
        work = Path(where)
        delays = work / "handoffs-as-delays.yaml"
        delays.write_text(yaml.safe_dump(replace(preset("cpu-workers-2"), transfers="overlapped").to_dict()))
        platforms = {"free crossings": workers_without_handoffs(work), "hand-offs as delays": delays,
                     "cpu-workers-2": "cpu-workers-2"}
        for model, objective, batch in CASES:
            if args.models and model not in args.models:
                continue
            rows += rows_of(model, objective, batch, platforms, work, args)
    text = table(rows, command)
    print(text)
    (args.out or OUT).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
