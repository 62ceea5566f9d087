"""Seeded random DNN-like task graphs: chains, branch blocks and residual blocks, and benchmark platforms.

Costs follow a GPU-centred model: a base time per task on the fastest GPU type, slower GPU types 1.2-2.5x,
CPUs 5-20x; output tensors sized so that moving one over a 16 GB/s link costs ``ccr`` (0.1-1 by default)
times the task's GPU time; weights 0-64 MB; a batch table at 1, 2, 4, ..., 32 samples whose per-sample
cost falls with batch size on GPUs (fixed launch cost amortised) and much less on CPUs.
"""

from __future__ import annotations

import random

from .graph import Task, TaskGraph
from .platform import Device, Link, Platform

GPU_TYPES = ("a100", "v100")
CPU_TYPE = "cpu"
BATCHES = (1, 2, 4, 8, 16, 32)
REFERENCE_BANDWIDTH = 16e9


def layered_dag(n: int, *, seed: int = 0, device_types: tuple[str, ...] = (CPU_TYPE,) + GPU_TYPES,
                ccr: tuple[float, float] = (0.1, 1.0), max_width: int = 4) -> TaskGraph:
    """A DNN-like DAG of ``n`` tasks with one source and one sink, built from blocks as real networks are:
    chains of layers, branch blocks (2..max_width parallel branches of 1-3 layers that merge, as in
    Inception) and residual blocks (a chain with a skip connection into its merge, as in ResNet).
    """
    if n < 2:
        raise ValueError("a DNN-like DAG needs at least 2 tasks")
    rng = random.Random(seed)
    edges: set[tuple[int, int]] = set()
    count = 1  # task 0 is the source
    tail = 0  # the task the next block hangs from

    def new(*preds: int) -> int:
        nonlocal count
        v = count
        count += 1
        edges.update((u, v) for u in preds)
        return v

    while count < n - 1:
        room = n - 1 - count
        kind = rng.random()
        if kind < 0.35 and room >= 4:  # branch block: parallel branches, then a merge
            width = rng.randint(2, max(2, max_width))
            ends = []
            for _ in range(width):
                if count >= n - 2:
                    break
                v = tail
                for _ in range(rng.randint(1, 3)):
                    if count >= n - 2:
                        break
                    v = new(v)
                ends.append(v)
            tail = new(*ends)
        elif kind < 0.55 and room >= 3:  # residual block: a short chain and a skip into the merge
            v = tail
            for _ in range(rng.randint(1, 3)):
                if count >= n - 2:
                    break
                v = new(v)
            tail = new(v, tail)
        else:  # a chain of layers
            for _ in range(min(rng.randint(1, 3), room)):
                tail = new(tail)
    new(tail)
    tasks = _dnn_like_tasks(n, rng, device_types, ccr)
    return TaskGraph.create(tasks, [(f"t{a}", f"t{b}") for a, b in sorted(edges)], name=f"dnn-like-n{n}-s{seed}")


def random_dag(n: int, *, seed: int = 0, device_types: tuple[str, ...] = (CPU_TYPE,) + GPU_TYPES,
               ccr: tuple[float, float] = (0.1, 1.0), window: int = 8, max_inputs: int = 3) -> TaskGraph:
    """A randomly wired DAG of ``n`` tasks with one source and one sink and (almost always) no series point
    between them: each task reads 1..``max_inputs`` of the ``window`` tasks before it, as randomly wired
    networks do (Xie et al. 2019); tasks nobody reads feed the sink. Costs as in :func:`layered_dag`.

    >>> g = random_dag(32, seed=1)
    >>> len(g), sum(not p for p in g.predecessors.values()), sum(not s for s in g.successors.values())
    (32, 1, 1)
    """
    if n < 3:
        raise ValueError("a randomly wired DAG needs at least 3 tasks")
    rng = random.Random(seed)
    edges: set[tuple[int, int]] = set()
    for v in range(1, n - 1):
        earlier = list(range(max(0, v - window), v))
        edges.update((u, v) for u in rng.sample(earlier, min(len(earlier), rng.randint(1, max_inputs))))
    read = {u for u, _ in edges}
    edges.update((u, n - 1) for u in range(n - 1) if u not in read)
    tasks = _dnn_like_tasks(n, rng, device_types, ccr)
    return TaskGraph.create(tasks, [(f"t{a}", f"t{b}") for a, b in sorted(edges)], name=f"random-n{n}-s{seed}")


def _dnn_like_tasks(n: int, rng: random.Random, device_types: tuple[str, ...], ccr: tuple[float, float]) -> list[Task]:
    """``n`` tasks with GPU-centred costs (see the module docstring): the first GPU type is the fastest."""
    gpus = [dt for dt in device_types if dt != CPU_TYPE]
    factors = {}
    for dt in device_types:  # the first GPU type is the fastest
        factors[dt] = (5.0, 20.0) if dt == CPU_TYPE else ((1.0, 1.0) if gpus and dt == gpus[0] else (1.2, 2.5))
    tasks = []
    for i in range(n):
        base = rng.lognormvariate(-7.0, 0.8)  # about 1 ms on the fastest GPU
        time, table = {}, {}
        for dt in device_types:
            t1 = base * rng.uniform(*factors[dt])
            serial = 0.85 if dt == CPU_TYPE else 0.15  # share of the cost that grows with batch size
            time[dt] = t1
            table[dt] = {b: t1 * ((1 - serial) + serial * b) for b in BATCHES if b != 1}
        comm = rng.uniform(*ccr) * base
        tasks.append(Task(id=f"t{i}", kind="op", time=time, time_by_batch=table,
                          memory_bytes=rng.uniform(0, 64e6), output_bytes=comm * REFERENCE_BANDWIDTH,
                          flops=base * 10e12))
    return tasks


# GPU types in speed order for benchmark platforms, with their host links (PCIe, see presets/paper-server.yaml)
BENCHMARK_GPUS = (("a100", 40e9, 31.5e9), ("v100", 16e9, 15.75e9), ("l4", 24e9, 31.5e9))


def benchmark_platform(k: int) -> Platform:
    """One host CPU and ``k - 1`` different GPUs (a100, v100, l4), each on its own PCIe link."""
    if not 2 <= k <= 1 + len(BENCHMARK_GPUS):
        raise ValueError(f"k must be between 2 and {1 + len(BENCHMARK_GPUS)}")
    devices = [Device("cpu", CPU_TYPE, 192e9, "server0", True)]
    devices += [Device(name, name, mem, "server0", False, Link(bw, 10e-6)) for name, mem, bw in BENCHMARK_GPUS[:k - 1]]
    return Platform(tuple(devices), f"cpu+{k - 1}gpu", description="benchmark platform: a CPU and different GPUs")


def benchmark_device_types(k: int) -> tuple[str, ...]:
    return (CPU_TYPE,) + tuple(name for name, _, _ in BENCHMARK_GPUS[:k - 1])
