"""Benchmark: the DiviML headline (best plan against the best single device), before and after the cost-model
fixes of issue 29, with where each gain comes from.

For each model and platform (paper-server: Xeon, V100, A100; h100-server: Xeon, H100 SXM), objective latency
(batch 1) and batched throughput (a batch of 8): the best single device's time, the best plan's (the best of
split, HEFT and, for the batch, data parallelism with unequal shares), their ratio, the best plan's proven
gap, and the tasks the plan puts elsewhere than the best single device (by kind, with the time they take).

Two cost models, the operators measured on this CPU in both:
- after: constants folded at capture, views free on every device but the measured host, the server CPU
  derived from this CPU by the rule of diviml.frontends.host, GPU launch 12.2 us (measured on the H100);
- before: no folding, views charged as kernels, this CPU's one-thread times standing for the server's CPU,
  GPU launch 5 us (an assumption). Today's solvers run on both, so the difference is the cost model's.
  (The batch tables of "before" come from the same dynamic-batch capture; the name-matched tables it once
  had are refused today, not reproduced.)

    python benchmarks/headline.py                          # every model, both platforms (about 40 min)
    python benchmarks/headline.py --models resnet50 --limit 5
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from collections import Counter
from pathlib import Path

import diviml
from diviml import catalogue
from diviml.frontends import pytorch
from diviml.frontends.host import HOST_TYPE
from diviml.frontends.zoo import get
from diviml.validate import validate

OUT = Path(__file__).parent / "results" / "headline.md"
MODELS = ("resnet50", "googlenet", "inception_v3", "densenet121", "mobilenet_v3_large", "efficientnet_b0",
          "convnext_tiny", "randwire-ws-small-s0", "vit_b_16", "swin_t", "hf-bert-base", "hf-gpt2")
PLATFORMS = ("paper-server", "h100-server")
BATCH = 8


@contextlib.contextmanager
def cost_model_before():
    """The cost model before issue 29: views are kernels, GPU launch an assumed 5 us (the CPU and the folding
    are chosen by the profile call)."""
    from diviml.frontends.pytorch import _measure  # where the capture asks whether an operator is a view
    saved_view, saved_specs = _measure.is_view, dict(catalogue.CATALOGUE)
    _measure.is_view = lambda kind, inputs, result: False
    for name, spec in saved_specs.items():
        if not spec.is_cpu:
            catalogue.CATALOGUE[name] = dataclasses.replace(spec, launch_overhead=5e-6)
    try:
        yield
    finally:
        _measure.is_view = saved_view
        catalogue.CATALOGUE.clear()
        catalogue.CATALOGUE.update(saved_specs)


def graphs(name: str) -> dict:
    """The model's graph under each cost model, profiled at batches 1 and 8 on this CPU (one thread)."""
    model = get(name)
    gpus = [t for t, s in catalogue.CATALOGUE.items() if not s.is_cpu]
    after = pytorch.profile(model.build, model.inputs, name=name, batches=(1, BATCH), measured_type=HOST_TYPE,
                            analytic_types=list(catalogue.CATALOGUE), repeats=1, min_time_s=0.5)
    with cost_model_before():
        before = pytorch.profile(model.build, model.inputs, name=name, batches=(1, BATCH), measured_type="cpu",
                                 analytic_types=gpus, repeats=1, min_time_s=0.5, fold_constants=False)
    return {"before": before, "after": after}


def solve(problem, solver: str, limit: float):
    plan = diviml.solve(problem, solver, time_limit=limit)
    assert validate(plan, problem).ok, f"{solver} returned a plan the validator rejects"
    return plan


def where_gain(problem, plan, single_device: str) -> str:
    """Tasks the plan runs off the best single device: count and time by kind, the three largest."""
    moved: Counter = Counter()
    count: Counter = Counter()
    split = set()
    devices_of: dict[str, set] = {}
    for a in plan.assignments:
        devices_of.setdefault(a.task, set()).add(a.device)
    shares: Counter = Counter()
    for a in plan.assignments:
        task = problem.graph.by_id[a.task]
        if task.kind == "input" or a.device == single_device and len(devices_of[a.task]) == 1:
            continue
        if len(devices_of[a.task]) > 1:
            split.add(a.task)
            continue
        seconds = problem.time(a.task, a.device, a.batch)
        if seconds > 0:  # a shape query or a view: moves no work
            moved[(a.device, task.kind)] += seconds
            count[(a.device, task.kind)] += 1
    for task in split:
        shares[" + ".join(f"{a.batch} on {a.device}" for a in sorted(
            (a for a in plan.assignments if a.task == task), key=lambda a: -(a.batch or 0)))] += 1
    parts = [f"{count[k]} {k[1]} on {k[0]} ({v * 1e3:.2f} ms)" for k, v in moved.most_common(3)]
    if split:
        pattern, n = shares.most_common(1)[0]
        parts.insert(0, f"{len(split)} tasks split over devices ({n} of them {pattern})")
    return "; ".join(parts) or "nothing: the single device's plan"


def run(name: str, limit: float, progress) -> list[dict]:
    t0 = time.perf_counter()
    by_model = graphs(name)
    progress(f"{name}: profiled in {time.perf_counter() - t0:.0f} s")
    rows = []
    for platform in PLATFORMS:
        for objective in ("latency", "batch"):
            for model_name, graph in by_model.items():
                obj = diviml.Objective(objective, batch_size=BATCH if objective == "batch" else None)
                problem = diviml.Problem(graph, diviml.preset(platform), obj)
                single = solve(problem, "best-device", limit)
                candidates = [solve(problem, "split", limit), solve(problem, "heft", limit)]
                if objective == "batch":
                    candidates.append(solve(problem, "data-parallel", limit))
                best = min(candidates, key=lambda p: p.objective)
                bound = max(p.bound for p in candidates + [single])
                device = single.assignments[0].device
                rows.append({"model": name, "platform": platform, "objective": objective, "cost model": model_name,
                             "tasks": len(graph), "single": single.objective, "single device": device,
                             "best": best.objective, "solver": best.solver, "gap": (best.objective - bound) / best.objective,
                             "where": where_gain(problem, best, device)})
                r = rows[-1]
                progress(f"  {platform} {objective} {model_name}: single {device} {r['single'] * 1e3:.3f} ms, best "
                         f"{r['best'] * 1e3:.3f} ms ({r['solver']}), x{r['single'] / r['best']:.2f}, gap "
                         f"{100 * r['gap']:.1f}%")
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | platform | objective | cost model | tasks | best single device (ms) | best plan (ms) | "
             "speed-up | gap | solver | off the single device |", "|---" * 11 + "|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['platform']} | {r['objective']} | {r['cost model']} | {r['tasks']} | "
                     f"{r['single device']} {r['single'] * 1e3:.3f} | {r['best'] * 1e3:.3f} | "
                     f"{r['single'] / r['best']:.2f}x | {100 * r['gap']:.1f}% | {r['solver']} | {r['where']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--limit", type=float, default=10.0, help="seconds per solve (default 10)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    rows = []
    for name in args.models:
        rows += run(name, args.limit, progress)
    text = (f"# Headline: best plan against the best single device, before and after the cost-model fixes\n\n"
            f"Command: `python benchmarks/headline.py --limit {args.limit:g}{' --models ' + ' '.join(args.models) if args.models != list(MODELS) else ''}`"
            f"; this CPU measured with one thread (2-core shared host), GPUs by the catalogue's roofline; "
            f"latency at batch 1, batch = {BATCH} requests at once. Speed-up = best single device / best plan; gap = "
            f"the best plan against the best lower bound any solver proved.\n\n" + table(rows) + "\n")
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
