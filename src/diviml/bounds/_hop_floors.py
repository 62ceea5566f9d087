"""The least hops a pipeline's devices pay whatever runs where: each takes a tensor in and sends one out (the
hop work LP's floors, :mod:`._hops`)."""

from __future__ import annotations

import heapq
import math

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_matrix

from ..graph import Task
from ..problem import Problem

__all__ = ["ALL", "cheapest_hop", "floors_of"]

ALL = ""  # the key of all devices' floor (:func:`floors_of`)
MAX_ASSIGNED = 100_000  # devices x sizes of tensor in the floors' transportation LP (GPT-3 on six-servers: 26 x 7)


def floors_of(problem: Problem, kinds: dict[str, list[str]]) -> dict[str, float]:
    """The least hops the devices pay when each runs a share of the graph, per kind and (key :data:`ALL`) for
    all of them together: a device that holds no source task takes a tensor in, and one that holds no sink
    sends one out, each at its cheapest hop (through host memory or a peer link, as
    :func:`diviml.simulate.pipeline_loads` charges it). A tensor enters at most as many devices as it has
    readers, and leaves only its producer's: a kind's floor is its devices' cheapest entries and exits of
    those; all devices' together, the least such assignment of tensors to every device (a transportation LP),
    where a few small tensors (GPT-3's tokens) cannot spare every device its activation's hop.

    The floors count every device. A plan that leaves some idle pays less, but each of its devices at least
    the time T it is measured by; so the LP's rows still hold for it with an idle device's hops counted at
    most ``pad``, the dearest device's cheapest entry and exit among tensors of which every device could take
    one, wherever T >= ``pad``. The floors are given only where the work spread over every device, a lower
    bound on T, is at least ``pad``. GPT-3 in BF16 over six-servers: an A100 pays 3.2 ms, its 50 MB
    activation in and out; the bound 0.1592 -> 0.1596 s (the LP's hops between kinds already cover most).
    """
    graph, platform = problem.graph, problem.platform
    peers: dict[str, list] = {}
    for pair, link in platform.peer_links.items():
        for d in pair:
            peers.setdefault(d, []).append(link)
    classes: dict[tuple, list[int]] = {}  # tensors alike for their hops -> [tensors, readers]
    first: dict[tuple, Task] = {}
    for t in graph.tasks:
        if graph.successors[t.id]:
            key = (t.output_bytes, t.transfer_time, t.id if t.transfer_time is not None else None)
            row = classes.setdefault(key, [0, 0])
            row[0], row[1] = row[0] + 1, row[1] + len(graph.successors[t.id])
            first.setdefault(key, t)
    cost = {(d.name, key): cheapest_hop(problem, task, d.name, peers)
            for d in platform.devices for key, task in first.items()}
    n = len(platform.devices)
    # a device's cheapest entry and exit among the sizes every device can take: one of those sizes, twice
    pad = max((2 * min((cost[d.name, key] for key, row in classes.items() if row[0] >= n), default=math.inf)
               for d in platform.devices), default=math.inf)
    spread = sum(min((problem.time(t.id, d) for d in problem.allowed_devices[t.id]), default=0.0)
                 for t in graph.tasks) / max(n, 1)
    if pad > spread:
        return {}
    sources = sum(1 for t in graph.tasks if not graph.predecessors[t.id])
    sinks = sum(1 for t in graph.tasks if not graph.successors[t.id])
    out: dict[str, float] = {}
    for k, names in kinds.items():
        least = {key: min(cost[d, key] for d in names) for key in classes}
        out[k] = sum(heapq.nsmallest(max(len(names) - sources, 0), (least[key] for key, row in classes.items()
                                                                    for _ in range(min(row[1], len(names))))))
        out[k] += sum(heapq.nsmallest(max(len(names) - sinks, 0), (least[key] for key, row in classes.items()
                                                                   for _ in range(min(row[0], len(names))))))
    devices = [d.name for d in platform.devices]
    if len(devices) * len(classes) <= MAX_ASSIGNED:
        entering, leaving = _assigned(devices, classes, cost, 1, sources), _assigned(devices, classes, cost, 0, sinks)
        if entering is not None and leaving is not None:
            out[ALL] = entering + leaving
    return out


def _assigned(devices: list[str], classes: dict[tuple, list[int]], cost: dict, column: int,
              spared: int) -> float | None:
    """The least cost of one tensor of ``classes`` for every device but ``spared`` of them, at most
    ``classes[key][column]`` devices a class (a transportation LP); None where HiGHS fails."""
    keys = list(classes)
    n, m = len(devices), len(keys) + 1  # the last column: spared (no tensor, no cost)
    c = np.array([cost[d, key] if key is not None else 0.0 for d in devices for key in [*keys, None]])
    columns = np.arange(n * m)
    a_eq = csr_matrix((np.ones(n * m), (columns // m, columns)), shape=(n, n * m))
    a_ub = csr_matrix((np.ones(n * m), (columns % m, columns)), shape=(m, n * m))
    b_ub = np.array([classes[key][column] for key in keys] + [spared], dtype=float)
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.ones(n), bounds=(0, None), method="highs")
    return float(res.fun) if res.status == 0 else None


def cheapest_hop(problem: Problem, task: Task, device: str, peers: dict[str, list]) -> float:
    """What ``device`` pays to take ``task``'s output in or send it out: a hop through host memory, or the time of
    one of its peer links in ``peers`` (device -> links)."""
    platform = problem.platform
    return min([platform.hop_time(task, platform.by_name[device])] + [link.time(task.output_bytes)
                                                                       for link in peers.get(device, [])])
