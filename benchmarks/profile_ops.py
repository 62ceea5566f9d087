"""Benchmark: per-operator profiles against end-to-end runs, on the CPU or a CUDA device (issue: PyTorch
front end).

For each model: the sum of the profiled operator medians vs the measured end-to-end time of the model
(same thread count, median of repeated runs, synchronised on CUDA), both as captured (the decomposed ATen
graph the tasks are the operators of, and what the runtime runs) and as the eager module (which may take fused
kernels the decomposed graph does not, and adds nn.Module call overhead), a second profile's agreement with the
first (median per-operator relative difference, share within 10%, and of the totals), and how well the
catalogue's roofline for the measured device predicts its operators (median error before and after the
fitted scale). Prints a table and writes benchmarks/results/profile_<device type>.md.

    python benchmarks/profile_ops.py                  # the issue's models on the CPU, 1 thread
    python benchmarks/profile_ops.py --device cuda    # on the first GPU (results/profile_h100-sxm.md, ...)
    python benchmarks/profile_ops.py --models resnet18,gpt-tiny
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from diviml.catalogue import CATALOGUE
from diviml.frontends import zoo
from diviml.frontends.pytorch import MIN_TIMING_S, WARMUP_S_CUDA, calibrate, capture, measured_device_type, profile_zoo

RESULTS = Path(__file__).parent / "results"
MODELS = ("resnet50", "googlenet", "inception_v3", "vgg16", "mobilenet_v3_large", "densenet121", "gpt-tiny",
          "bert-tiny", "randwire-ws-s0", "randwire-er-s0", "randwire-ba-s0")


def end_to_end(name: str, device: str, threads: int, repeats: int) -> tuple[float, float]:
    """Median time of one run of the captured graph, and of the eager module (runs of the two interleaved)."""
    torch.set_num_threads(threads)
    spec = zoo.get(name)
    model = spec.build().eval().to(device)
    inputs = [x.to(device) for x in spec.inputs(1)]
    captured = capture(model, inputs)
    runs = {"captured": lambda: captured.run(), "eager": lambda: model(*inputs)}
    cuda = torch.device(device).type == "cuda"
    samples: dict[str, list[float]] = {k: [] for k in runs}
    with torch.no_grad():
        started = time.perf_counter()
        for run in runs.values():
            run()
        while cuda and time.perf_counter() - started < WARMUP_S_CUDA:  # the same warm-up as the profile's
            for run in runs.values():
                run()
            torch.cuda.synchronize(device)
        for _ in range(repeats):
            for key, run in runs.items():
                if cuda:
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                run()
                if cuda:
                    torch.cuda.synchronize(device)
                samples[key].append(time.perf_counter() - t0)
    return statistics.median(samples["captured"]), statistics.median(samples["eager"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=MIN_TIMING_S, help="seconds of timing per profile at least")
    ap.add_argument("--machine", default="2 cores, shared", help="what to write about the machine")
    ap.add_argument("--out", type=Path, help="default: benchmarks/results/profile_<device type>.md")
    args = ap.parse_args()
    kind = measured_device_type(args.device)
    out = args.out or RESULTS / f"profile_{kind}.md"
    rows = []
    for name in args.models.split(","):
        first = profile_zoo(name, device=args.device, repeats=args.repeats, threads=args.threads,
                            min_time_s=args.min_time)
        second = profile_zoo(name, device=args.device, repeats=args.repeats, threads=args.threads,
                             min_time_s=args.min_time)
        e2e, eager = end_to_end(name, args.device, args.threads, max(args.repeats, 20))
        total1 = sum(t.time[kind] for t in first.tasks)
        total2 = sum(t.time[kind] for t in second.tasks)
        per_op = [abs(a.time[kind] - b.time[kind]) / a.time[kind]
                  for a, b in zip(first.tasks, second.tasks) if a.time[kind] > 0]
        within = sum(d <= 0.10 for d in per_op) / len(per_op)
        fit = calibrate(first, kind) if kind in CATALOGUE else None
        rows.append((name, len(first), total1, e2e, eager, statistics.median(per_op), within,
                     abs(total2 - total1) / total1, fit))
        print(f"{name}: sum {total1 * 1e3:.2f} ms, end-to-end {e2e * 1e3:.2f} ms captured, {eager * 1e3:.2f} ms eager",
              flush=True)
    lines = ["| model | operators | sum of operator medians (ms) | end-to-end, captured (ms) | ratio | "
             "end-to-end, eager (ms) | ratio | re-profile: median per-op diff | re-profile: operators within 10% | "
             "re-profile: total diff | roofline: median op error | fitted scale | error after scaling |",
             "|---" * 13 + "|"]
    for n, k, s, e, eager, d, w, t, fit in rows:
        roofline = (f"{100 * fit.error_before:.0f}% | {fit.scale:.3g} | {100 * fit.error_after:.0f}%" if fit
                    else "no catalogue entry | | ")
        lines.append(f"| {n} | {k} | {s * 1e3:.2f} | {e * 1e3:.2f} | {s / e:.3f} | {eager * 1e3:.2f} | {s / eager:.3f} | "
                     f"{100 * d:.1f}% | {100 * w:.0f}% | {100 * t:.1f}% | {roofline} |")
    where = f"{kind} ({torch.cuda.get_device_name(torch.device(args.device))}, torch {torch.__version__})" \
        if kind != "host" else f"this CPU (torch {torch.__version__})"
    text = (f"# Operator profiles vs end-to-end runs: {kind}\n\nCommand: `python benchmarks/profile_ops.py --device "
            f"{args.device} --threads {args.threads} --repeats {args.repeats} --min-time {args.min_time:g}`; device: {where}; machine: "
            f"{args.machine}. Batch 1. Roofline: the catalogue's model of {kind} against the measured operators.\n\n"
            + "\n".join(lines) + "\n")
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


if __name__ == "__main__":
    main()
