"""Fuzzing the runtime: random plans for zoo models run over `cpu-workers-2`, their outputs checked.

For each model and seed: a random latency plan (every task on a worker drawn at random), a random batch
plan for a batch of 4 (one split drawn for every task, a split drawn per task, or a few tasks split and the
rest whole on a worker drawn at random), each timed by the simulator, validated and run once by the runtime,
and a random pipeline plan (every task on a worker drawn at random), run once as a stream of as few requests
as fill it (its values go back and forth between the workers, so its stages are deep).
A plan must give the unsplit module's outputs or be refused in one clear line (`InputError`: a split that
would cut a value whose samples the runtime cannot locate); anything else (a mismatch, a crash, another
error) is a finding. Prints each outcome, then a table of counts written to benchmarks/results/fuzz_runtime.md.

    python benchmarks/fuzz_runtime.py                                  # every model below, 3 seeds
    python benchmarks/fuzz_runtime.py --models gpt-tiny resnet18 --seeds 10
    python benchmarks/fuzz_runtime.py --first-seed 100                 # plans not drawn before
    python benchmarks/fuzz_runtime.py --nproc 2 --out results/fuzz_runtime_ranks.md   # a rank per worker

With ``--nproc 2`` each plan runs as two gloo ranks through the command line (``diviml run --nproc 2``): the
values that cross workers are sent between processes. A one-line refusal (exit status 2, a rank's own
included) that is not a mismatch counts as refused, as an ``InputError`` does in one process.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

from diviml import InputError, Objective, Problem, preset
from diviml.frontends.pytorch import profile_zoo
from diviml.runtime import run
from diviml.runtime._pieces import piece_stages

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "runtime"))
from test_rows import plan_from_parts  # noqa: E402  (the runtime tests' plans: simulated, then validated)
from test_stream import pipeline_plan, program_of  # noqa: E402

OUT = Path(__file__).parent / "results" / "fuzz_runtime.md"
MODELS = ["gpt-tiny", "bert-tiny", "llama-tiny", "randwire-er-s1", "randwire-ba-s2", "resnet18", "mobilenet_v3_large",
          "efficientnet_b0", "swin_t", "vit_b_16", "convnext_tiny"]
PLATFORM = preset("cpu-workers-2")
WORKERS = ["worker0", "worker1"]
BATCH = 4


def random_split(rng: random.Random, batch: int) -> list[tuple[str, int]]:
    cuts = sorted(rng.sample(range(1, batch), rng.randint(0, batch - 1)))
    return [(rng.choice(WORKERS), b - a) for a, b in zip([0] + cuts, cuts + [batch])]


def random_parts(rng: random.Random, problem: Problem) -> tuple[str, dict]:
    tasks = problem.graph.tasks
    if problem.objective.kind in ("latency", "pipeline"):
        return problem.objective.kind, {t.id: [(rng.choice(WORKERS), 1)] for t in tasks}
    style = rng.choice(["one split", "a split per task", "a few split"])
    if style == "one split":
        split = random_split(rng, BATCH)
        return style, {t.id: split for t in tasks}
    if style == "a split per task":
        return style, {t.id: random_split(rng, BATCH) for t in tasks}
    return style, {t.id: random_split(rng, BATCH) if rng.random() < 0.1 else [(rng.choice(WORKERS), BATCH)]
                   for t in tasks}


def plan_of(name: str, problem: Problem, parts: dict):
    """The plan to run and, for a pipeline plan, the requests that fill its stream (else None)."""
    if problem.objective.kind != "pipeline":
        return plan_from_parts(problem, parts), None
    placement = {t: p[0][0] for t, p in parts.items()}
    return pipeline_plan(problem, placement), max(piece_stages(program_of(name, placement)).values()) + 2


def outcome(name: str, problem: Problem, parts: dict) -> str:
    try:
        plan, requests = plan_of(name, problem, parts)
        report = run(name, plan, PLATFORM, problem=problem, repeats=1, warmup=0, requests=requests)
    except InputError as exc:
        return f"refused: {str(exc)[:160]}"
    except Exception as exc:  # noqa: BLE001 - anything else is a finding
        return f"FINDING crash {exc!r} at {traceback.format_exc().splitlines()[-3].strip()}"
    return "outputs match" if report.outputs_match else f"FINDING outputs differ by {report.max_abs_error:.3g}"


def outcome_as_ranks(name: str, problem: Problem, parts: dict, nproc: int) -> str:
    """The same, run as ``nproc`` ranks by ``diviml run --nproc``."""
    with tempfile.TemporaryDirectory() as d:
        plan, requests = plan_of(name, problem, parts)
        plan.save(Path(d) / "plan.json")
        r = subprocess.run([sys.executable, "-m", "diviml", "run", name, Path(d) / "plan.json", "--platform",
                            PLATFORM.name, "--nproc", str(nproc), "--repeats", "1", "--warmup", "0", "--batch",
                            str(problem.batch_size), "--json", "--quiet"]
                           + (["--requests", str(requests)] if requests else []), capture_output=True, text=True,
                           timeout=600)
    error = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    if r.returncode == 0:
        report = json.loads(r.stdout)
        return "outputs match" if report["outputs_match"] else f"FINDING outputs differ by {report['max_abs_error']:.3g}"
    # a rank that refused the plan in one line exits with status 2 too, and the launcher names it
    if r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "outputs differ" not in error and (
            "failed (exit status" not in error or "failed (exit status 2)" in error):
        return f"refused: {error.removeprefix('diviml: error: ')[:160]}"
    return f"FINDING exit {r.returncode}: {error[:300]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--seeds", type=int, default=3, help="seeds per model (default 3)")
    parser.add_argument("--first-seed", type=int, default=0, help="draw seeds from here on (default 0)")
    parser.add_argument("--nproc", type=int, default=1, help="run each plan as this many ranks (default 1)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    counts: Counter = Counter()
    for name in args.models:
        began = time.perf_counter()
        one = profile_zoo(name, repeats=1, min_time_s=0.0)
        problems = [Problem(one, PLATFORM, Objective("latency")),
                    Problem(profile_zoo(name, batches=tuple(range(1, BATCH + 1)), repeats=1, min_time_s=0.0),
                            PLATFORM, Objective("batch", BATCH)),
                    Problem(one, PLATFORM, Objective("pipeline"))]
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            rng = random.Random(seed)
            for problem in problems:
                style, parts = random_parts(rng, problem)
                said = (outcome(name, problem, parts) if args.nproc == 1 else
                        outcome_as_ranks(name, problem, parts, args.nproc))
                counts[said.split(":")[0] if said.startswith("refused") else said[:40]] += 1
                print(f"{name} seed {seed} {style}: {said}", flush=True)
        print(f"{name}: {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    lines = ["# Fuzzing the runtime: random plans run over cpu-workers-2" + (
        f" as {args.nproc} ranks" if args.nproc > 1 else ""), "",
             f"`python {' '.join(sys.argv)}`: {len(args.models)} models ({', '.join(args.models)}), {args.seeds} "
             f"seeds from {args.first_seed}, a random latency plan, a random batch-4 plan and a random pipeline plan "
             "(a stream) each.", "", "| outcome | plans |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in counts.most_common()]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
