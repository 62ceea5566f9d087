"""The profiling host's CPU, measured, and the rule that turns its operator times into a catalogue CPU's.

Operators timed on this machine are recorded as device type ``host``: this CPU, with the thread count it was
profiled with, is what ``diviml run`` executes on (presets ``cpu-workers-2`` and ``cpu-ranks-2``). A server
preset's CPU is a catalogue entry instead (``cpu``, the Xeon Gold 6248 of ``paper-server``): a different chip
with more cores. Its time for an operator is derived from the host's measured time, not copied from it:

    t_target = d + (t_host - d) * W_target / W_host

- ``d`` is the host's measured dispatch time (a one-element operator called back to back): the framework's
  per-operator cost, which the same software pays on the server;
- ``W = max(flops / peak, bytes / bandwidth)`` is the roofline work of the operator on each CPU, where the
  operator runs on ``u = min(cores, ceil(max(output elements, flops / 2) / GRAIN_SIZE))`` cores and gets
  ``u / cores`` of the chip's peak and bandwidth (PyTorch's ``at::parallel_for`` gives each thread at least
  GRAIN_SIZE elements, so a small elementwise operator does not spread over a 20-core socket; BLAS and
  oneDNN split a contraction by blocks of its multiply-adds);
- the host's peak and bandwidth per thread are measured here (a 512 x 512 matrix product and a 32 MB copy).

So each operator keeps the efficiency it showed on the host (a batch norm that reached a tenth of the host's
peak reaches a tenth of the server's) and moves to the server's peak, core count and memory bandwidth. An
operator with no work (no flops, no bytes) keeps its measured time. Without a host measurement (an analytic
profile), a catalogue CPU's time is its roofline with the same core rule plus its catalogue dispatch cost.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

from ..catalogue import DeviceSpec, cores_used

__all__ = ["HOST_TYPE", "HostSpec", "measure_host", "derived_time"]

HOST_TYPE = "host"


@dataclass(frozen=True)
class HostSpec:
    """This machine's CPU as measured: per-thread FP32 peak and copy bandwidth, per-operator dispatch."""
    peak_flops_per_thread: float  # FLOP/s
    bandwidth_per_thread: float  # bytes/s
    dispatch: float  # seconds per operator call
    threads: int  # intra-op threads the profile ran with

    def work(self, flops: float, nbytes: float, outputs: float | None) -> float:
        u = cores_used(self.threads, outputs, flops)
        return max(flops / (self.peak_flops_per_thread * u), nbytes / (self.bandwidth_per_thread * u))

    def roofline(self, flops: float, nbytes: float, outputs: float | None) -> float:
        return self.work(flops, nbytes, outputs) + self.dispatch


def _median_call(fn, min_s: float = 0.05) -> float:
    """Median seconds per call of ``fn`` over 5 samples of back-to-back calls, each at least ``min_s / 5``."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    calls = max(1, math.ceil(min_s / 5 / once))
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls)
    return statistics.median(samples)


def measure_host(threads: int = 1) -> HostSpec:
    """Measure this CPU with one intra-op thread (about half a second); ``threads`` is recorded as the
    count the profile runs with."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            n = 512
            a, b = torch.randn(n, n), torch.randn(n, n)
            peak = 2 * n ** 3 / _median_call(lambda: torch.mm(a, b), 0.2)
            src = torch.randn(8 * 1024 * 1024)  # 32 MB, beyond the caches
            dst = torch.empty_like(src)
            bandwidth = 2 * src.numel() * 4 / _median_call(lambda: dst.copy_(src), 0.2)
            one = torch.ones(1)
            dispatch = _median_call(lambda: torch.neg(one), 0.05)
    finally:
        torch.set_num_threads(before)
    return HostSpec(peak, bandwidth, dispatch, threads)


def derived_time(target: DeviceSpec, flops: float, nbytes: float, outputs: float | None,
                 measured: float | None, host: HostSpec | None) -> float:
    """The time of one operator on the catalogue CPU ``target`` by the rule in the module docstring."""
    w_target = target.work(flops, nbytes, outputs)
    if measured is None or host is None:
        return w_target + target.launch_overhead
    w_host = host.work(flops, nbytes, outputs)
    if w_host <= 0:
        return measured
    # never below the target's own roofline: an operator timed in a quiet moment can beat a host peak that was
    # measured in a busy one, and the ratio would then carry an efficiency above 100% to the target
    return max(host.dispatch + w_target, host.dispatch + max(0.0, measured - host.dispatch) * w_target / w_host)
