"""Benchmark: what two workers of one process cost each other, the situation `diviml run` puts a CPU device and
a GPU device in (a worker thread each, one interpreter).

Each row times one kind of operator call in one situation, in microseconds per call (median of 5 blocks
after one warm-up block): GPU launches (a ReLU, launch-bound; a 3x3 convolution of 64 channels at 56x56) from
the main thread or a worker thread, on the default or a side stream, synchronised every 4 calls (a piece of
4 operators) or not, alone or while the other thread runs CPU convolutions (8 intra-op threads); CPU
convolutions (64 channels at 28x28) alone or while the other thread launches GPU work (or, without a GPU,
runs CPU convolutions); small CPU operators (dispatch-bound) alone and beside more of them; and the one-way
hand-off between two threads by ``threading.Event``, as the runtime's workers hand values over. Without a GPU
only the CPU rows and the hand-off run. Prints the table and writes it to
benchmarks/results/runtime_contention.md (or --out).

    python benchmarks/runtime_contention.py
    OMP_WAIT_POLICY=PASSIVE python benchmarks/runtime_contention.py --out /tmp/passive.md
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

OUT = Path(__file__).parent / "results" / "runtime_contention.md"
F = torch.nn.functional
CALLS = 400


class Ops:
    """The operators timed, on the CPU and, where there is one, the first GPU."""

    def __init__(self, threads: int):
        torch.set_num_threads(threads)
        self.threads = threads
        self.xc, self.wc = torch.randn(1, 64, 28, 28), torch.randn(64, 64, 3, 3)
        self.cuda = torch.cuda.is_available()
        if self.cuda:
            gpu = torch.device("cuda")
            self.xg, self.wg = torch.randn(1, 64, 56, 56, device=gpu), torch.randn(64, 64, 3, 3, device=gpu)
            self.side = torch.cuda.Stream(gpu)

    def gpu(self, stream=None, per_sync: int = 0, op: str = "relu") -> float:
        """Seconds per GPU call over CALLS calls, synchronised at the end (and every ``per_sync`` calls)."""
        ctx = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad(), ctx:
            for i in range(CALLS):
                F.relu(self.xg) if op == "relu" else F.conv2d(self.xg, self.wg, padding=1)
                if per_sync and (i + 1) % per_sync == 0:
                    (stream or torch.cuda.current_stream()).synchronize()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / CALLS

    def cpu(self, calls: int = 100) -> float:
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(calls):
                F.conv2d(self.xc, self.wc, padding=1)
        return (time.perf_counter() - t0) / calls

    def cpu_small(self, calls: int = 400) -> float:
        """Seconds per call of a small CPU operator (a ReLU over 64x28x28): dispatch-bound, as randomly wired
        networks' operators are."""
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(calls):
                F.relu(self.xc)
        return (time.perf_counter() - t0) / calls

    def busy_cpu_small(self) -> None:
        with torch.no_grad():
            for _ in range(8):
                F.relu(self.xc)

    def busy_cpu(self) -> None:
        with torch.no_grad():
            F.conv2d(self.xc, self.wc, padding=1)

    def busy_gpu(self) -> None:
        with torch.no_grad():
            for _ in range(4):
                F.relu(self.xg)
        torch.cuda.current_stream().synchronize()

    def in_thread(self, fn, *args):
        """``fn(*args)`` in a fresh worker thread with the same intra-op threads, the main thread waiting."""
        out: list = []

        def work():
            torch.set_num_threads(self.threads)
            out.append(fn(*args))
        t = threading.Thread(target=work)
        t.start()
        t.join()
        return out[0]

    def beside(self, fn, busy, *args):
        """``fn(*args)`` in a worker thread while the main thread runs ``busy`` over and over."""
        done, out = threading.Event(), []

        def work():
            torch.set_num_threads(self.threads)
            out.append(fn(*args))
            done.set()
        t = threading.Thread(target=work)
        t.start()
        while not done.is_set():
            busy()
        t.join()
        return out[0]


def handoff(n: int = 300) -> float:
    """One-way hand-off between two threads by threading.Event (set, the other wakes), median of ``n``."""
    a, b, samples = threading.Event(), threading.Event(), []

    def other():
        for _ in range(n):
            a.wait()
            a.clear()
            b.set()
    t = threading.Thread(target=other)
    t.start()
    for _ in range(n):
        t0 = time.perf_counter()
        a.set()
        b.wait()
        b.clear()
        samples.append((time.perf_counter() - t0) / 2)
    t.join()
    return statistics.median(samples)


def rows(ops: Ops) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    if ops.cuda:
        side = ops.side
        out += [
            ("gpu relu, main thread", lambda: ops.gpu()),
            ("gpu relu, main thread, side stream", lambda: ops.gpu(side)),
            ("gpu relu, worker thread", lambda: ops.in_thread(ops.gpu, side)),
            ("gpu relu, main, sync every 4", lambda: ops.gpu(side, 4)),
            ("gpu relu, worker, sync every 4", lambda: ops.in_thread(ops.gpu, side, 4)),
            ("gpu relu, worker, main busy on cpu convs", lambda: ops.beside(ops.gpu, ops.busy_cpu, side)),
            ("gpu relu, worker sync every 4, main busy on cpu convs",
             lambda: ops.beside(ops.gpu, ops.busy_cpu, side, 4)),
            ("gpu conv, main thread", lambda: ops.gpu(None, 0, "conv")),
            ("gpu conv, worker, main busy on cpu convs", lambda: ops.beside(ops.gpu, ops.busy_cpu, side, 0, "conv"))]
    out += [(f"cpu conv {ops.threads} threads, main thread", lambda: ops.cpu()),
            ("cpu conv, worker thread", lambda: ops.in_thread(ops.cpu))]
    if ops.cuda:
        out.append(("cpu conv, worker, main busy launching gpu", lambda: ops.beside(ops.cpu, ops.busy_gpu)))
    else:
        out.append(("cpu conv, worker, main busy on cpu convs", lambda: ops.beside(ops.cpu, ops.busy_cpu)))
    out += [("cpu relu (small), main thread", lambda: ops.cpu_small()),
            ("cpu relu (small), worker, main busy on small cpu relus",
             lambda: ops.beside(ops.cpu_small, ops.busy_cpu_small))]
    out.append(("event hand-off one way", handoff))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=8, help="intra-op threads of each worker (8: cpu-h100's CPU)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    ops = Ops(args.threads)
    device = torch.cuda.get_device_name(0) if ops.cuda else "no GPU"
    lines = ["# Two workers of one process: what they cost each other", "",
             f"Command: `python {' '.join(sys.argv)}`; {device}, {os.cpu_count()} cores, torch {torch.__version__}, "
             f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}. Microseconds per call, median of 5 blocks.", "",
             "| situation | us per call |", "|---|---|"]
    for name, f in rows(ops):
        f()
        value = statistics.median(f() for _ in range(5))
        lines.append(f"| {name} | {value * 1e6:.1f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
