"""Benchmark: plans run on this machine's CPU workers, measured beside what they predicted.

For each model and platform: profile with the platform's thread count, schedule with split (latency),
run the plan (outputs checked every run), write the measured times and hand-offs back (--calibrate-out,
--calibrate-platform-out), schedule again on the calibrated graph and platform and run that plan; run the best single worker's plan the same way. Every step is
the CLI a user runs (`diviml profile / schedule / run --json`), `cpu-ranks-2` as two gloo ranks
(`--nproc 2`). Prints a table and writes benchmarks/results/runtime_fidelity.md.

Columns: predicted and measured latency (ms, median of the timed runs) of the split plan before and after
calibration, their ratio, whether outputs matched on every run, the best single worker's plan measured,
and the measured speed-up of the calibrated split plan over it. --overhead measures the runtime's cost per
piece instead (a piece per task against one piece, one worker).

    python benchmarks/runtime_fidelity.py                       # the table
    python benchmarks/runtime_fidelity.py --link                # gloo send/recv cost between two ranks here
    python benchmarks/runtime_fidelity.py --overhead            # the runtime's cost per piece
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).parent / "results" / "runtime_fidelity.md"
LINK_OUT = Path(__file__).parent / "results" / "runtime_link_gloo.md"
OVERHEAD_OUT = Path(__file__).parent / "results" / "runtime_overhead.md"
MODELS = ["googlenet", "inception_v3", "randwire-ws-s0", "resnet50", "gpt2-small"]
PLATFORMS = [("cpu-workers-2", 1), ("cpu-ranks-2", 2)]


def diviml(*args) -> dict:
    r = subprocess.run([sys.executable, "-m", "diviml", *map(str, args), "--json", "--quiet"], capture_output=True,
                       text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"diviml {' '.join(map(str, args))}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def row(model: str, platform: str, nproc: int, work: Path, repeats: int, min_time: float) -> dict:
    g = work / f"{model}-{platform}.json"
    diviml("profile", model, "--platform", platform, "--out", g, "--min-time", min_time)
    run_args = ["--platform", platform, "--repeats", repeats] + (["--nproc", nproc] if nproc > 1 else [])
    out = {"model": model, "platform": platform + (f" ({nproc} ranks)" if nproc > 1 else "")}
    plans = {}
    for name, graph, solver in (("single", g, "best-device"), ("split", g, "split")):
        plans[name] = work / f"{model}-{platform}-{name}.json"
        diviml("schedule", graph, "--platform", platform, "--solver", solver, "--out", plans[name],
               "--time-limit", 120)
    single = diviml("run", model, plans["single"], "--graph", g, *run_args)
    calibrated = work / f"{model}-{platform}-calibrated.json"
    measured_platform = work / f"{model}-{platform}-calibrated.yaml"
    before = diviml("run", model, plans["split"], "--graph", g, "--calibrate-out", calibrated,
                    "--calibrate-platform-out", measured_platform, *run_args)
    plans["after"] = work / f"{model}-{platform}-after.json"
    diviml("schedule", calibrated, "--platform", measured_platform, "--solver", "split", "--out", plans["after"],
           "--time-limit", 120)
    run_args[1] = measured_platform
    after = diviml("run", model, plans["after"], "--graph", calibrated, *run_args)
    out.update(predicted=before["predicted_s"], measured=before["measured_s"], ratio=before["ratio"],
               predicted_after=after["predicted_s"], measured_after=after["measured_s"], ratio_after=after["ratio"],
               match=before["outputs_match"] and after["outputs_match"] and single["outputs_match"],
               single=single["measured_s"], speedup=single["measured_s"] / after["measured_s"],
               pieces=after["pieces"])
    return out


def table(rows: list[dict], command: str) -> str:
    lines = [
        "# Plans run on this machine: measured beside predicted", "",
        f"Command: `{command}`; machine: 2 cores, shared; latency in ms, median of the timed runs. 'before': "
        "the split plan on the profiled graph; 'after': split again on the graph calibrated by that run, and run. "
        "'single': the best single worker's plan, run. Speed-up: single / after, both measured. The runtime's "
        "cost per piece: results/runtime_overhead.md.", "",
        "| model | platform | predicted | measured | ratio | predicted after | measured after | ratio after | "
        "outputs match | single measured | speed-up | pieces |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['platform']} | {r['error'][:120]} |" + " |" * 10)
            continue
        lines.append(f"| {r['model']} | {r['platform']} | {r['predicted'] * 1e3:.2f} | {r['measured'] * 1e3:.2f} | "
                     f"{r['ratio']:.3f} | {r['predicted_after'] * 1e3:.2f} | {r['measured_after'] * 1e3:.2f} | "
                     f"{r['ratio_after']:.3f} | {'yes' if r['match'] else 'NO'} | {r['single'] * 1e3:.2f} | "
                     f"{r['speedup']:.3f} | {r['pieces']} |")
    return "\n".join(lines) + "\n"


PINGPONG = """
import statistics, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
for n in [4, 1024, 16384, 262144, 1048576, 4194304]:
    t = torch.zeros(n // 4)
    samples = []
    for i in range(40):
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(t, 1); dist.recv(t, 1)
        else:
            dist.recv(t, 0); dist.send(t, 0)
        samples.append((time.perf_counter() - t0) / 2)
    if rank == 0:
        print(n, statistics.median(samples[5:]), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def link() -> str:
    """One-way gloo send/recv time between two ranks on this host, by ping-pong."""
    import os

    from diviml.runtime._dist import free_port
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "pingpong.py"
        script.write_text(PINGPONG)
        procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                                  env=dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                                           WORLD_SIZE="2", OMP_NUM_THREADS="1")) for r in range(2)]
        text = procs[0].communicate(timeout=600)[0]
        procs[1].wait(timeout=60)
    points = [(int(a), float(b)) for a, b in (line.split() for line in text.splitlines() if line.strip())]
    (n0, t0), (n1, t1) = points[-2], points[-1]
    bandwidth = (n1 - n0) / (t1 - t0)
    lines = ["# gloo send/recv between two ranks on this host (one-way, median of 35 ping-pongs)", "",
             "Command: `python benchmarks/runtime_fidelity.py --link`", "", "| bytes | one-way (us) |", "|---|---|"]
    lines += [f"| {n} | {t * 1e6:.1f} |" for n, t in points]
    lines += ["", f"Fit for a platform's network link: latency {statistics.median(t for n, t in points if n <= 16384) * 1e6:.0f} us "
              f"(median up to 16 KiB), bandwidth {bandwidth / 1e9:.2f} GB/s (between the two largest sizes)."]
    return "\n".join(lines) + "\n"


def overhead(models: list[str], runs: int) -> str:
    """The runtime's cost per piece, on one worker in one process (same threads, same inputs): the captured
    module called directly, the whole model as one piece, and a piece per task; per piece = (per-task run -
    one-piece run) / (pieces - 1). Blocks of each in turn, medians of ``runs``."""
    import torch

    from diviml.frontends.pytorch import capture_at, task_of_nodes
    from diviml.runtime import cut, model_source
    from diviml.runtime._execute import Executor
    torch.set_num_threads(1)
    lines = ["# Runtime overhead per piece", "",
             "Command: `python benchmarks/runtime_fidelity.py --overhead`; one process, one worker of one thread; "
             f"blocks of {runs // 3} runs of each in turn after a warm-up block, medians. 'one piece': the whole "
             "model as one piece against the captured module called directly. 'per piece': (a piece per task - one "
             "piece) / (pieces - 1), what the runtime adds for each piece it runs.", "",
             "| model | direct (ms) | one piece (ms) | one piece - direct (us) | pieces | a piece per task (ms) | "
             "per piece (us) |", "|---|---|---|---|---|---|---|"]
    for name in models:
        source = model_source(name)
        torch.manual_seed(0)
        captured = capture_at(source.build(), source.inputs, 1)
        tasks = list(dict.fromkeys(task_of_nodes(captured).values()))
        values = dict(zip([n.name for n in captured.gm.graph.nodes if n.op == "placeholder"], captured.args))
        executors = []
        for max_tasks in (None, 1):
            program = cut(captured, {"worker0": tasks}, max_tasks=max_tasks)
            executors.append(Executor(program, {"worker0": torch.device("cpu")}, {"worker0": 1},
                                      {v: values[v] for v in program.state}, {v: values[v] for v in program.inputs}))
        calls = [lambda: captured.gm(*captured.args)] + [e.run for e in executors]
        samples: list[list[float]] = [[] for _ in calls]
        with torch.no_grad():
            for block in range(4):  # blocks of each in turn: alternating single calls disturbs both
                for into, call in zip(samples, calls):
                    for i in range(runs // 3 + 3):
                        t0 = time.perf_counter()
                        call()
                        if block and i >= 3:
                            into.append(time.perf_counter() - t0)
        for e in executors:
            e.close()
        direct, one, each = (statistics.median(s) for s in samples)
        k = sum(len(p) for p in executors[1].program.pieces.values())
        lines.append(f"| {name} | {direct * 1e3:.3f} | {one * 1e3:.3f} | {(one - direct) * 1e6:.0f} | {k} | "
                     f"{each * 1e3:.3f} | {(each - one) / max(1, k - 1) * 1e6:.1f} |")
        print(lines[-1], file=sys.stderr)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--platforms", nargs="+", default=[p for p, _ in PLATFORMS])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--min-time", type=float, default=2.0, help="profiling seconds per model")
    parser.add_argument("--link", action="store_true", help="measure gloo's send/recv cost instead")
    parser.add_argument("--overhead", action="store_true", help="measure the runtime's cost per piece instead")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    command = "python " + " ".join([sys.argv[0], *sys.argv[1:]])
    if args.link:
        text = link()
        target = args.out or LINK_OUT
    elif args.overhead:
        models = list(dict.fromkeys(args.models + ["gpt-tiny"] if args.models == MODELS else args.models))
        text = overhead(models, max(args.repeats, 30))
        target = args.out or OVERHEAD_OUT
    else:
        rows = []
        nprocs = dict(PLATFORMS)
        with tempfile.TemporaryDirectory() as d:
            for model in args.models:
                for platform in args.platforms:
                    t0 = time.perf_counter()
                    try:
                        rows.append(row(model, platform, nprocs.get(platform, 1), Path(d), args.repeats, args.min_time))
                    except RuntimeError as exc:
                        rows.append({"model": model, "platform": platform, "error": str(exc)})
                    print(f"{model} on {platform}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        text = table(rows, command)
        target = args.out or OUT
    print(text)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(f"wrote {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
