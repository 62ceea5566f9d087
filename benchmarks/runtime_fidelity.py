"""Benchmark: plans run on this machine's devices (CPU workers, or the CPU and a GPU), measured beside what
they predicted.

For each model and platform: profile with the platform's thread count (on a platform with a GPU, on the CPU
and the GPU: --device cpu,cuda), schedule with split (latency, or --objective batch), run the plan (outputs
checked every run), write the measured times and hand-offs back (--calibrate-out, --calibrate-platform-out),
schedule again on the calibrated graph and platform and run that plan, with the best single device's plan on
that graph measured beside it in the same process, their runs in turn (`run --compare`; on several ranks, run
on its own). Every step is the CLI a user runs (`diviml profile / schedule / run --json`), `cpu-ranks-2` as two
gloo ranks (`--nproc 2`). Prints a table and writes benchmarks/results/runtime_fidelity.md (or --out).

Columns: predicted and measured latency (ms, median of the timed runs) of the split plan before and after
calibration, their ratio, whether outputs matched on every run, the best single device's plan measured,
and the measured speed-up of the calibrated split plan over it. --overhead measures the runtime's cost per
piece instead (a piece per task against one piece, one worker).

    python benchmarks/runtime_fidelity.py                       # the table
    python benchmarks/runtime_fidelity.py --link                # gloo send/recv cost between two ranks here
    python benchmarks/runtime_fidelity.py --overhead            # the runtime's cost per piece
    python benchmarks/runtime_fidelity.py --overhead --device cuda --models googlenet   # and a GPU's piece vs its profile
    # on a machine with an H100 (benchmarks/gpu_session.sh runs these on a lent one)
    python benchmarks/runtime_fidelity.py --cuda-link --platform-out cpu-h100-measured.yaml
    python benchmarks/runtime_fidelity.py --platforms cpu-h100-measured.yaml --out results/runtime_fidelity_h100.md
    python benchmarks/runtime_fidelity.py --platforms cpu-h100-measured.yaml --nproc 1 2   # one process; a rank per device
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

OUT = Path(__file__).parent / "results" / "runtime_fidelity.md"
LINK_OUT = Path(__file__).parent / "results" / "runtime_link_gloo.md"
OVERHEAD_OUT = Path(__file__).parent / "results" / "runtime_overhead.md"
CUDA_LINK_OUT = Path(__file__).parent / "results" / "runtime_link_cuda.md"
MODELS = ["googlenet", "inception_v3", "randwire-ws-s0", "resnet50", "gpt2-small"]
PLATFORMS = [("cpu-workers-2", 1), ("cpu-ranks-2", 2)]


def diviml(*args, keep: Path | None = None) -> dict:
    """The command's --json answer (also written to ``keep``, where given)."""
    r = subprocess.run([sys.executable, "-m", "diviml", *map(str, args), "--json", "--quiet"], capture_output=True,
                       text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"diviml {' '.join(map(str, args))}: {r.stderr.strip()}")
    if keep is not None:
        keep.write_text(r.stdout)
    return json.loads(r.stdout)


@dataclass(frozen=True)
class Case:
    """What one row runs: the platform (preset or file), its ranks, the objective and its batch, the solve."""
    platform: str
    nproc: int = 1
    objective: str = "latency"
    batch: int = 1
    time_limit: float = 120.0

    @property
    def label(self) -> str:
        name = Path(self.platform).stem if self.platform.endswith((".yaml", ".yml", ".json")) else self.platform
        return name + (f" ({self.nproc} ranks)" if self.nproc > 1 else "") + (
            f", batch {self.batch}" if self.objective == "batch" else "")


def _file_name(text: str) -> str:
    """``text`` with every run of characters a file name should not hold made one '-'."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def row(model: str, case: Case, work: Path, repeats: int, min_time: float) -> dict:
    from diviml.platform import Platform
    tag = _file_name(f"{model}-{case.label}")
    on_gpu = not all(d.is_host for d in Platform.load(case.platform).devices)
    batches = ",".join(str(b) for b in (1, 2, 4, 8, 16, 32) if b <= case.batch) if case.objective == "batch" else "1"
    # one profile per model, platform and batches: rows that differ only in ranks solve on the same graph
    g = work / f"{_file_name(f'{model}-{Path(case.platform).stem}-b{batches}')}.json"
    if not g.exists():
        diviml("profile", model, "--platform", case.platform, "--out", g, "--min-time", min_time, "--batch",
               batches, *(["--device", "cpu,cuda"] if on_gpu else []))
    run_args = ["--platform", case.platform, "--repeats", repeats] + (["--nproc", case.nproc] if case.nproc > 1 else [])
    solve = ["--objective", case.objective, "--time-limit", case.time_limit] + (
        ["--batch", case.batch] if case.objective == "batch" else [])
    out = {"model": model, "platform": case.label}
    plans = {}
    plans["split"] = work / f"{tag}-split.json"
    diviml("schedule", g, "--platform", case.platform, "--solver", "split", "--out", plans["split"], *solve)
    calibrated = work / f"{tag}-calibrated.json"
    measured_platform = work / f"{tag}-calibrated.yaml"
    before = diviml("run", model, plans["split"], "--graph", g, "--calibrate-out", calibrated,
                    "--calibrate-platform-out", measured_platform, *run_args, keep=work / f"{tag}-split-run.json")
    plans["after"] = work / f"{tag}-after.json"
    diviml("schedule", calibrated, "--platform", measured_platform, "--solver", "split", "--out", plans["after"],
           *solve)
    run_args[1] = measured_platform
    if case.nproc == 1:  # the best single device's plan (on the calibrated graph) measured beside, in one process
        after = diviml("run", model, plans["after"], "--graph", calibrated, *run_args, "--compare",
                       keep=work / f"{tag}-after-run.json")
        single = {"measured_s": after["single_measured_s"], "outputs_match": after["single_outputs_match"]}
        single_device = [after["single_device"]]
    else:  # --compare runs in one process: the single device's plan run on its own
        after = diviml("run", model, plans["after"], "--graph", calibrated, *run_args,
                       keep=work / f"{tag}-after-run.json")
        plans["single"] = work / f"{tag}-single.json"
        diviml("schedule", calibrated, "--platform", measured_platform, "--solver", "best-device", "--out",
               plans["single"], *solve)
        single = diviml("run", model, plans["single"], "--graph", calibrated, *run_args,
                        keep=work / f"{tag}-single-run.json")
        single_device = sorted({a["device"] for a in json.loads(plans["single"].read_text())["assignments"]})
    out.update(single_device=single_device, max_error=max(before["max_abs_error"], after["max_abs_error"]))
    out.update(predicted=before["predicted_s"], measured=before["measured_s"], ratio=before["ratio"],
               predicted_after=after["predicted_s"], measured_after=after["measured_s"], ratio_after=after["ratio"],
               match=before["outputs_match"] and after["outputs_match"] and single["outputs_match"],
               single=single["measured_s"], speedup=single["measured_s"] / after["measured_s"],
               pieces=after["pieces"])
    return out


def table(rows: list[dict], command: str, machine: str) -> str:
    lines = [
        "# Plans run on this machine: measured beside predicted", "",
        f"Command: `{command}`; machine: {machine}; latency of one request (a batch for 'batch N' rows) in ms, "
        "median of the timed runs. 'before': the split plan on the profiled graph; 'after': split again on the "
        "graph calibrated by that run, and run. 'single': the best single device's plan (best-device on the "
        "calibrated graph), run in the same process as 'after', their runs in turn (run --compare; with ranks, on "
        "its own). "
        "Speed-up: single / after, both measured. Error: the largest absolute difference from the unsplit "
        "module's outputs (CPU) over every run. The runtime's cost per piece: results/runtime_overhead.md.", "",
        "| model | platform | predicted | measured | ratio | predicted after | measured after | ratio after | "
        "outputs match | error | single device | single measured | speed-up | pieces |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['platform']} | {r['error'][:160]} |" + " |" * 12)
            continue
        lines.append(f"| {r['model']} | {r['platform']} | {r['predicted'] * 1e3:.2f} | {r['measured'] * 1e3:.2f} | "
                     f"{r['ratio']:.3f} | {r['predicted_after'] * 1e3:.2f} | {r['measured_after'] * 1e3:.2f} | "
                     f"{r['ratio_after']:.3f} | {'yes' if r['match'] else 'NO'} | {r['max_error']:.2g} | "
                     f"{', '.join(r['single_device'])} | {r['single'] * 1e3:.2f} | {r['speedup']:.3f} | "
                     f"{r['pieces']} |")
    return "\n".join(lines) + "\n"


def cuda_link(platform_out: Path | None) -> str:
    """Host <-> GPU copy time as the runtime copies (pageable host memory; to the GPU ``non_blocking`` on a
    stream of its own, then synchronised; back to the host blocking), one way, medians of 30 after a warm-up;
    a link fitted to them, and, with ``platform_out``, the cpu-h100 preset with that link written there."""
    import torch
    import yaml

    from diviml.platform import preset
    gpu = torch.device("cuda")
    stream = torch.cuda.Stream(gpu)
    points = []
    for n in [4, 1024, 16384, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20]:
        host = torch.rand(max(1, n // 4))
        on_gpu = host.to(gpu)
        samples: dict[str, list[float]] = {"to": [], "from": []}
        for i in range(35):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.cuda.stream(stream):
                host.to(gpu, non_blocking=True)
            stream.synchronize()
            t1 = time.perf_counter()
            on_gpu.to("cpu")
            t2 = time.perf_counter()
            if i >= 5:
                samples["to"].append(t1 - t0)
                samples["from"].append(t2 - t1)
        points.append((n, statistics.median(samples["to"]), statistics.median(samples["from"])))
    # the slope between 1 and 16 MiB, the sizes of these models' tensors (64 MiB back to the host also
    # faults in fresh pageable pages: its time is shown, not fitted)
    (n0, a0, b0), (n1, a1, b1) = (next(p for p in points if p[0] == n) for n in (1 << 20, 16 << 20))
    bandwidth = 2 * (n1 - n0) / ((a1 - a0) + (b1 - b0))
    latency = statistics.median([t for n, a, b in points if n <= 16384 for t in (a, b)])
    lines = ["# Host <-> GPU copies as the runtime makes them (one-way, median of 30)", "",
             "Command: `python benchmarks/runtime_fidelity.py --cuda-link`; device: "
             f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}.", "",
             "| bytes | to the GPU (us) | to the host (us) |", "|---|---|---|"]
    lines += [f"| {n} | {a * 1e6:.1f} | {b * 1e6:.1f} |" for n, a, b in points]
    lines += ["", f"Fit for the GPU's link: latency {latency * 1e6:.1f} us (median up to 16 KiB, both ways), "
              f"bandwidth {bandwidth / 1e9:.2f} GB/s (between 1 and 16 MiB, both ways)."]
    if platform_out is not None:  # the cpu-h100 preset with this GPU in it: its type as profiles record it
        from diviml.frontends.pytorch import measured_device_type
        gpu_type, name = measured_device_type("cuda"), torch.cuda.get_device_name(0)
        data = preset("cpu-h100").to_dict()
        data["name"] = f"cpu-{gpu_type}-measured"
        data["description"] = (f"This machine's CPU (8 intra-op threads) and its {name} in one process, the link "
                               "measured by runtime_fidelity.py --cuda-link")
        for d in data["devices"]:
            if "link" in d:
                d.update(name=gpu_type, type=gpu_type, memory=float(torch.cuda.get_device_properties(0).total_memory),
                         link={"bandwidth": float(f"{bandwidth:.3g}"), "latency": float(f"{latency:.3g}")})
        sources = data.setdefault("sources", {})
        for key in [k for k in sources if k.startswith("h100")]:
            del sources[key]
        sources[f"{gpu_type} link"] = (f"measured by 'python benchmarks/runtime_fidelity.py --cuda-link' on {name}: "
                                       "pageable copies as the runtime makes them")
        sources[f"{gpu_type} memory"] = f"torch.cuda.get_device_properties: {name}"
        platform_out.write_text(yaml.safe_dump(data, sort_keys=False))
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


def overhead(models: list[str], runs: int, device: str = "cpu", min_time: float = 0.5) -> str:
    """The runtime's cost per piece, on one worker in one process (same threads, same inputs): the captured
    module called directly, the whole model as one piece, and a piece per task; per piece = (per-task run -
    one-piece run) / (pieces - 1). Blocks of each in turn, medians of ``runs``. Beside them, what the profile
    predicts for the one piece on ``device`` (its operators' medians summed, as a one-device plan adds them):
    on a GPU, where a one-piece plan has run 1.1-1.8x its profile (a lent H200, runs in two processes), this
    says whether the program or the runtime takes the time."""
    import torch

    from diviml.frontends.pytorch import capture_at, task_of_nodes
    from diviml.frontends.pytorch._measure import measure
    from diviml.frontends.pytorch._profile import on_device
    from diviml.runtime import cut, model_source
    from diviml.runtime._execute import Executor
    torch.set_num_threads(1)
    target = torch.device(device)
    sync = (lambda: torch.cuda.synchronize(target)) if target.type == "cuda" else (lambda: None)
    lines = ["# Runtime overhead per piece", "",
             f"Command: `python {' '.join(sys.argv)}`; one process, one worker ({device}; one intra-op thread); "
             f"blocks of {runs // 3} runs of each in turn after a warm-up block, medians. 'profile': the "
             f"operators' medians as `diviml profile` measures them (min-time {min_time} s), summed: what a "
             "one-device plan predicts. 'direct': the captured module called (and synchronised, on a GPU). 'one "
             "piece': the whole model as one piece. 'per piece': (a piece per task - one piece) / (pieces - 1), "
             "what the runtime adds for each piece it runs.", "",
             "| model | profile (ms) | direct (ms) | one piece (ms) | one piece - direct (us) | pieces | "
             "a piece per task (ms) | per piece (us) |", "|---|---|---|---|---|---|---|---|"]
    for name in models:
        source = model_source(name)
        torch.manual_seed(0)
        captured = capture_at(source.build(), source.inputs, 1)
        if target.type != "cpu":
            captured = on_device(captured, device)
        profiled = sum(statistics.median(r.times) for r in measure(captured, repeats=5, threads=1,
                                                                   min_time_s=min_time) if r.times)
        tasks = list(dict.fromkeys(task_of_nodes(captured).values()))
        values = dict(zip([n.name for n in captured.gm.graph.nodes if n.op == "placeholder"], captured.args))
        executors = []
        for max_tasks in (None, 1):
            program = cut(captured, {"worker0": tasks}, max_tasks=max_tasks)
            executors.append(Executor(program, {"worker0": target}, {"worker0": 1},
                                      {v: values[v] for v in program.state}, [{v: values[v] for v in program.inputs}]))
        calls = [lambda: (captured.gm(*captured.args), sync())] + [e.run for e in executors]
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
        direct, one, each = (statistics.median(x) for x in samples)
        k = sum(len(p) for p in executors[1].program.pieces.values())
        lines.append(f"| {name} | {profiled * 1e3:.3f} | {direct * 1e3:.3f} | {one * 1e3:.3f} | "
                     f"{(one - direct) * 1e6:.0f} | {k} | {each * 1e3:.3f} | {(each - one) / max(1, k - 1) * 1e6:.1f} |")
        print(lines[-1], file=sys.stderr)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--platforms", nargs="+", default=[p for p, _ in PLATFORMS],
                        help="presets or platform files; a platform with a GPU is profiled with --device cpu,cuda")
    parser.add_argument("--objective", choices=("latency", "batch"), default="latency")
    parser.add_argument("--batch", type=int, default=8, help="requests per batch for --objective batch")
    parser.add_argument("--time-limit", type=float, default=120.0, help="seconds per solve")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--min-time", type=float, default=2.0, help="profiling seconds per model")
    parser.add_argument("--machine", default="2 cores, shared", help="what the table says it ran on")
    parser.add_argument("--nproc", type=int, nargs="+",
                        help="run each platform as each of these numbers of ranks (default: cpu-ranks-2 as 2, "
                             "the others as 1; 2 on a CPU + GPU platform is a rank per device)")
    parser.add_argument("--link", action="store_true", help="measure gloo's send/recv cost instead")
    parser.add_argument("--cuda-link", action="store_true", help="measure host <-> GPU copies instead")
    parser.add_argument("--platform-out", type=Path, help="--cuda-link: write cpu-h100 with the measured link here")
    parser.add_argument("--overhead", action="store_true", help="measure the runtime's cost per piece instead")
    parser.add_argument("--device", default="cpu", help="--overhead: the torch device of its worker (cpu, cuda)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the graphs, plans and run reports (--json) in this folder")
    args = parser.parse_args()
    command = "python " + " ".join([sys.argv[0], *sys.argv[1:]])
    if args.link:
        text = link()
        target = args.out or LINK_OUT
    elif args.cuda_link:
        text = cuda_link(args.platform_out)
        target = args.out or CUDA_LINK_OUT
    elif args.overhead:
        models = list(dict.fromkeys(args.models + ["gpt-tiny"] if args.models == MODELS else args.models))
        text = overhead(models, max(args.repeats, 30), args.device, args.min_time)
        target = args.out or OVERHEAD_OUT
    else:
        rows: list[dict] = []
        nprocs = dict(PLATFORMS)
        target = args.out or OUT
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as d:
            work = args.keep or Path(d)
            work.mkdir(parents=True, exist_ok=True)
            for model in args.models:
                for platform, nproc in [(p, n) for p in args.platforms for n in args.nproc or [nprocs.get(p, 1)]]:
                    case = Case(platform, nproc, args.objective, args.batch if args.objective == "batch" else 1,
                                args.time_limit)
                    t0 = time.perf_counter()
                    try:
                        rows.append(row(model, case, work, args.repeats, args.min_time))
                    except (RuntimeError, subprocess.TimeoutExpired) as exc:
                        rows.append({"model": model, "platform": case.label, "error": str(exc)})
                        print(f"{model} on {case.label} failed: {exc}", file=sys.stderr)
                    print(f"{model} on {case.label}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
                    target.write_text(table(rows, command, args.machine))  # each row kept as it comes
        text = table(rows, command, args.machine)
    print(text)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(f"wrote {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
