"""Seeded random DNN-like task graphs: layers with branching, merging and skip connections.

Costs follow a GPU-centred model: a base time per task on the fastest GPU type, slower GPU types 1.2-2.5x,
CPUs 5-20x; output tensors sized so that moving one over a 16 GB/s link costs ``ccr`` (0.1-1 by default)
times the task's GPU time; weights 0-64 MB; a batch table at 1, 2, 4, ..., 32 samples whose per-sample
cost falls with batch size on GPUs (fixed launch cost amortised) and much less on CPUs.
"""

from __future__ import annotations

import random

from .graph import Task, TaskGraph

GPU_TYPES = ("a100", "v100")
CPU_TYPE = "cpu"
BATCHES = (1, 2, 4, 8, 16, 32)
REFERENCE_BANDWIDTH = 16e9


def layered_dag(n: int, *, seed: int = 0, device_types: tuple[str, ...] = (CPU_TYPE,) + GPU_TYPES,
                ccr: tuple[float, float] = (0.1, 1.0), max_width: int = 4) -> TaskGraph:
    """A DAG of ``n`` tasks with one source and one sink, DNN-like (layers of width 1..max_width)."""
    if n < 2:
        raise ValueError("a layered DAG needs at least 2 tasks")
    rng = random.Random(seed)
    layers: list[list[int]] = [[0]]
    count = 1
    while count < n - 1:
        width = min(rng.randint(1, max_width), n - 1 - count)
        layers.append(list(range(count, count + width)))
        count += width
    layers.append([n - 1])
    edges: set[tuple[int, int]] = set()
    for i in range(1, len(layers)):
        for v in layers[i]:
            prev = layers[i - 1]
            for u in rng.sample(prev, k=min(len(prev), rng.choice((1, 1, 2)))):
                edges.add((u, v))
            if i >= 2 and rng.random() < 0.15:  # skip connection (residual-like)
                edges.add((rng.choice(layers[i - 2]), v))
        for u in layers[i - 1]:  # every task feeds the next layer
            if not any(a == u for a, _ in edges):
                edges.add((u, rng.choice(layers[i])))
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
    return TaskGraph.create(tasks, [(f"t{a}", f"t{b}") for a, b in sorted(edges)], name=f"layered-n{n}-s{seed}")
