"""Benchmark: `diviml tune` on this machine's devices: schedule, run, calibrate from the run and schedule again until
the plan stops changing, every round measured.

For each model and platform: `diviml profile MODEL --platform P` (the platform's thread count), then `diviml tune
MODEL G --platform P --json` (split, --time-limit a round, --rounds at most). One row per round: the plan's
pieces and devices, predicted and measured latency (ms, median of --repeats runs), their ratio; the fastest round
marked. Prints a table and writes benchmarks/results/runtime_tune.md (or --out).

    python benchmarks/runtime_tune.py                                  # googlenet, inception_v3, randwire-ws-s0
    python benchmarks/runtime_tune.py --models randwire-ws-s0 --rounds 6
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from runtime_fidelity import diviml  # noqa: E402  (a command's --json answer)

OUT = Path(__file__).parent / "results" / "runtime_tune.md"
MODELS = ["googlenet", "inception_v3", "randwire-ws-s0"]


def rows(model: str, platform: str, args, work: Path) -> list[str]:
    g = work / f"{model}.json"
    diviml("profile", model, "--platform", platform, "--out", g, "--min-time", args.min_time)
    t0 = time.perf_counter()
    out = diviml("tune", model, g, "--platform", platform, "--time-limit", args.time_limit, "--rounds", args.rounds,
                 "--repeats", args.repeats)
    seconds = time.perf_counter() - t0
    print(f"{model} on {platform}: {seconds:.0f} s", file=sys.stderr)
    lines = []
    for k, r in enumerate(out["rounds"]):
        lines.append(f"| {model} | {platform} | {k + 1} | {r['pieces']} | {len(r['devices'])} | "
                     f"{r['predicted_s'] * 1e3:.2f} | {r['measured_s'] * 1e3:.2f} | {r['ratio']:.3f} | "
                     f"{'fastest' if k == out['best_round'] else ''} |")
    how = "plan repeated" if out["converged"] else "out of rounds"
    lines.append(f"| {model} | {platform} | {how} | | | | | | {out['speedup_over_first']:.3f}x round 1, "
                 f"{seconds:.0f} s |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--platforms", nargs="+", default=["cpu-workers-2"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=5.0, help="seconds for each round's solve")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--min-time", type=float, default=1.0, help="profiling seconds per model")
    ap.add_argument("--machine", default="2 cores, shared", help="what the table says it ran on")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    body = []
    with tempfile.TemporaryDirectory() as tmp:
        for platform in args.platforms:
            for model in args.models:
                body += rows(model, platform, args, Path(tmp))
    text = "\n".join([
        "# diviml tune: schedule, run, calibrate, schedule again", "",
        f"Command: `python benchmarks/runtime_tune.py {' '.join(sys.argv[1:])}`; machine: {args.machine}. Each round's "
        "plan is split's on the graph and platform calibrated by the previous round's run (round 1: the profile); "
        "latency of one request in ms, median of the timed runs; the loop ends when split returns a plan it ran "
        "already, or after --rounds runs. Last line of each model: why it ended, and the fastest round's speed-up "
        "over round 1 (both measured in the one process of `diviml tune`).", "",
        "| model | platform | round | pieces | devices | predicted | measured | ratio | |",
        "|---|---|---|---|---|---|---|---|---|", *body, ""])
    print(text)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
