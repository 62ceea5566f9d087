"""Running a captured model operator by operator and timing each (CPU wall clock, CUDA events)."""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable

from .._torch import float32_in_full, import_torch
from ._capture import Captured, task_of_nodes
from ._costs import NodeRecord, count_flops, half_dtype, is_view, nbytes, numel, stored_bytes


class _Clock:
    """Wall-clock timing on the CPU; CUDA-event timing, synchronised first, on a CUDA device."""

    def __init__(self, torch, device):
        self.torch = torch
        self.cuda = device.type == "cuda"
        self.device = device

    def start(self):
        if not self.cuda:
            return time.perf_counter()
        self.torch.cuda.synchronize(self.device)
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, started) -> float:
        if not self.cuda:
            return time.perf_counter() - started
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        event.synchronize()
        return started.elapsed_time(event) / 1e3


MIN_SAMPLE_S = 2e-4  # an operator faster than this is timed over several back-to-back calls per sample
# On a GPU a sample is longer and the warm-up runs for a while: an idle GPU drops its clocks (an H100 to a
# sixth), and short samples with gaps between them never bring them back up.
MIN_SAMPLE_S_CUDA = 1e-3
WARMUP_S_CUDA = 1.0
# Timing passes go on until this long has passed (and at least ``repeats`` passes ran, at most MAX_PASSES): on
# a shared machine the host runs faster or slower for seconds at a time, and five passes of a 1 ms model
# fit inside one such stretch. Spread over seconds, the medians of two profiles agree (bert-tiny re-profiled
# 26.6% apart in total with five passes).
MIN_TIMING_S = 2.0
MAX_PASSES = 200


def measure(captured: Captured, *, repeats: int = 5, warmup: int = 1, threads: int | None = 1,
            min_time_s: float = MIN_TIMING_S, progress: Callable[[str], None] | None = None) -> list[NodeRecord]:
    """Run the graph node by node, recording costs and (repeats > 0) the median time of every operator.

    After the warm-up the graph runs at least ``repeats`` times and, when ``repeats`` > 0, until
    ``min_time_s`` seconds of timing have passed (at most MAX_PASSES passes); each pass times every operator's own call once
    (averaged over enough back-to-back calls to reach MIN_SAMPLE_S, or MIN_SAMPLE_S_CUDA). Samples of one operator are thus
    spread over the whole profile, so a burst of noise on a shared machine spoils one sample of many
    operators, not every sample of a few: re-profiling gives steadier medians than timing each operator's
    repeats back to back. On a CUDA device (where the captured model and inputs live) each sample starts
    after a synchronise and is read off CUDA events, so it is the time the operator holds the stream when
    its calls run back to back: kernel time, or launch time where launching is slower."""
    torch = import_torch()
    if threads:
        torch.set_num_threads(threads)
    session = _Session(torch, captured)
    if session.clock.cuda:
        float32_in_full(torch)  # the kernels diviml run uses (TF32 off)
    gm = captured.gm

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            return session.run_node(self, node, super().run_node)

    with torch.no_grad():
        started = time.perf_counter()
        for _ in range(warmup):
            gm(*captured.args)
        while session.clock.cuda and warmup and time.perf_counter() - started < WARMUP_S_CUDA:
            gm(*captured.args)
            torch.cuda.synchronize(session.clock.device)
        Recorder(gm).run(*captured.args)  # costs and graph structure
        session.timing = True
        started, passes, shown = time.perf_counter(), 0, 0
        while passes < repeats or (repeats and passes < MAX_PASSES and time.perf_counter() - started < min_time_s):
            Recorder(gm).run(*captured.args)
            passes += 1
            # done when both the passes and the time are: the bar shows the one further from it
            done = min(passes / repeats, (time.perf_counter() - started) / min_time_s if min_time_s > 0 else 1.0)
            filled = int(20 * min(done, 1.0))
            if progress and filled > shown:  # at most 20 lines
                shown = filled
                progress(f"  [{'#' * filled}{'.' * (20 - filled)}] {passes} timing passes in "
                         f"{time.perf_counter() - started:.1f} s")
        if repeats:
            _add_dispatch(session, _whole_module_s(session.clock, gm, captured.args, repeats, min_time_s), progress)
    return list(session.records.values())


def _whole_module_s(clock: _Clock, gm, args, repeats: int, min_time_s: float) -> float:
    """The median time of the whole captured program, run as one call (at least ``repeats`` runs, and on
    until a quarter of ``min_time_s`` has passed, at most MAX_PASSES)."""
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < max(3, repeats) or (
            len(samples) < MAX_PASSES and time.perf_counter() - started < min_time_s / 4):
        t0 = clock.start()
        gm(*args)
        samples.append(clock.stop(t0))
    return statistics.median(samples)


def _add_dispatch(session: "_Session", whole: float, progress) -> None:
    """Where the whole program takes longer than its operators' medians add up to, the difference, shared
    evenly, is added to every operator's samples: each operator was timed over back-to-back calls of
    itself, which leaves out what running it once between two others costs (its call from the program's
    code, its inputs out of cache). On a CPU worker of one thread randwire-ws-s0's 483 operators summed to
    6.31 ms where the module took 8.06 ms, googlenet's 197 to 67.08 ms against 67.94 ms: 3.6 and 4.4 us an
    operator; a plan of one piece ran at the module's time (7.60 and 67.87 ms). Where the operators add up
    to more (a GPU's kernels overlapping their launches), nothing changes."""
    timed = [r for r in session.records.values() if r.times]
    total = sum(statistics.median(r.times) for r in timed)  # as the graph reads them (_costs.task_times)
    if not timed or whole <= total:
        return
    each = (whole - total) / len(timed)
    for r in timed:
        r.times[:] = [t + each for t in r.times]
    if progress:
        progress(f"  the whole program: {whole * 1e3:.4g} ms, its operators {total * 1e3:.4g} ms: "
                 f"{each * 1e6:.2g} us added to each of {len(timed)} operators")


class _Session:
    """What one :func:`measure` keeps while the interpreter runs the graph: a record per task, and once timing
    has begun (``timing``), each operator's samples, each averaged over enough back-to-back calls."""

    def __init__(self, torch, captured: Captured):
        self.torch = torch
        self.clock = _Clock(torch, captured.device)
        self.min_sample = MIN_SAMPLE_S_CUDA if self.clock.cuda else MIN_SAMPLE_S
        self.modules = dict(captured.gm.named_modules())
        self.task_of = task_of_nodes(captured)
        self.records: dict[str, NodeRecord] = {}
        self.calls_per_sample: dict[str, int] = {}
        self.state_names = set(captured.state)
        self.user = set(captured.user_inputs)
        self.timing = False

    def run_node(self, interpreter, node, default):
        """Run ``node`` as the interpreter would (``default``), recording and timing operators."""
        if node.op == "placeholder":
            result = default(node)
            if node.name in self.user and node.name not in self.records:
                self.records[node.name] = NodeRecord(node.name, "input", [], [], 0.0, 0.0, nbytes(result))
            return result
        if node.op not in ("call_function", "call_method", "call_module"):
            return default(node)
        if self.task_of[node.name] != node.name:  # a getitem: part of the task it unpacks
            return default(node)
        args, kwargs = interpreter.fetch_args_kwargs_from_env(node)
        module = self.modules[node.target] if node.op == "call_module" else None
        fn = module if module is not None else (
            node.target if node.op == "call_function" else getattr(args[0], node.target))
        call_args = args if node.op != "call_method" else args[1:]
        t0 = self.clock.start()
        result = fn(*call_args, **kwargs)
        elapsed = self.clock.stop(t0)
        if node.name not in self.records:
            self.records[node.name] = self.record(node, args, result, module)
        if self.timing:
            self.records[node.name].times.append(self.sample(node.name, fn, call_args, kwargs, elapsed))
        return result

    def sample(self, name: str, fn, call_args, kwargs, elapsed: float) -> float:
        """One timing sample of an operator: its call just timed, or the mean of k back-to-back calls where one
        is shorter than the minimum sample (k sized on the first timed pass)."""
        k = self.calls_per_sample.get(name)
        if k is None:
            k = self.calls_per_sample[name] = max(1, min(1000, math.ceil(self.min_sample / max(elapsed, 1e-7))))
        if k == 1:
            return elapsed
        t0 = self.clock.start()
        for _ in range(k):
            fn(*call_args, **kwargs)
        return self.clock.stop(t0) / k

    def record(self, node, args, result, module) -> NodeRecord:
        """What the operator costs besides time: producers, parameters read, FLOPs, bytes, views."""
        torch = self.torch
        producers, reads = [], []
        for a in node.all_input_nodes:
            src = self.task_of.get(a.name, a.name)
            if a.name in self.state_names:
                reads.append(a.name)
            elif src in self.records and src not in producers:
                producers.append(src)
        flat = [x for x in args if isinstance(x, torch.Tensor)] + [
            x for a in args if isinstance(a, (list, tuple)) for x in a if isinstance(x, torch.Tensor)]
        in_bytes = sum(nbytes(x) for x in flat)
        if module is not None:
            in_bytes += sum(nbytes(p) for p in module.parameters(recurse=False))
        kind = str(getattr(node.target, "__name__", node.target)).split(".")[0]
        return NodeRecord(node.name, kind, producers, reads,
                          count_flops(node.target, args, result, module), in_bytes + nbytes(result),
                          stored_bytes(result), alias=is_view(kind, flat, result), outputs=numel(result),
                          dtype=half_dtype(result))
