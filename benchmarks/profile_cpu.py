"""Benchmark: per-operator CPU profiles against end-to-end runs (issue: PyTorch front end).

For each model: the sum of the profiled operator medians vs the measured end-to-end time of the model
(same thread count, median of repeated runs), and a second profile's agreement with the first (median
per-operator relative difference, and of the totals). Prints a table and writes
benchmarks/results/profile_cpu.md.

    python benchmarks/profile_cpu.py                  # the issue's models, 1 thread
    python benchmarks/profile_cpu.py --models resnet18,gpt-tiny
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from diviml import zoo
from diviml.frontends.pytorch import profile_zoo

OUT = Path(__file__).parent / "results" / "profile_cpu.md"
MODELS = ("resnet50", "googlenet", "inception_v3", "vgg16", "mobilenet_v3_large", "densenet121", "gpt-tiny",
          "bert-tiny", "randwire-ws-s0", "randwire-er-s0", "randwire-ba-s0")


def end_to_end(name: str, threads: int, repeats: int) -> float:
    torch.set_num_threads(threads)
    spec = zoo.get(name)
    model = spec.build().eval()
    inputs = spec.inputs(1)
    samples = []
    with torch.no_grad():
        model(*inputs)
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(*inputs)
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    rows = []
    for name in args.models.split(","):
        first = profile_zoo(name, repeats=args.repeats, threads=args.threads)
        second = profile_zoo(name, repeats=args.repeats, threads=args.threads)
        e2e = end_to_end(name, args.threads, max(args.repeats, 5))
        total1 = sum(t.time["cpu"] for t in first.tasks)
        total2 = sum(t.time["cpu"] for t in second.tasks)
        per_op = [abs(a.time["cpu"] - b.time["cpu"]) / a.time["cpu"]
                  for a, b in zip(first.tasks, second.tasks) if a.time["cpu"] > 0]
        within = sum(d <= 0.10 for d in per_op) / len(per_op)
        rows.append((name, len(first), total1, e2e, total1 / e2e, statistics.median(per_op), within,
                     abs(total2 - total1) / total1))
        print(f"{name}: sum {total1 * 1e3:.2f} ms, end-to-end {e2e * 1e3:.2f} ms", flush=True)
    lines = ["| model | operators | sum of operator medians (ms) | end-to-end (ms) | ratio | re-profile: median per-op diff | "
             "re-profile: operators within 10% | re-profile: total diff |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {n} | {k} | {s * 1e3:.2f} | {e * 1e3:.2f} | {r:.3f} | {100 * d:.1f}% | {100 * w:.0f}% | {100 * t:.1f}% |"
              for n, k, s, e, r, d, w, t in rows]
    text = (f"# CPU profiles vs end-to-end runs\n\nCommand: `python benchmarks/profile_cpu.py --threads {args.threads} "
            f"--repeats {args.repeats}`; machine: 2 cores, shared. Batch 1.\n\n" + "\n".join(lines) + "\n")
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
