"""What the pipeline (max-load) solvers share: nodes contracted into classes, device classes.

A *class* is a unit of the stage order (:class:`~diviml.problem.StageOrder`: a co-location group or a
task in none; units without a forward task stand in it as zero-cost forward nodes ordered by their backward
edges), with the units on one cycle of that order fused where the split is contiguous: a contiguous split
must put a whole cycle on one device (a path would leave any part of it and come back). The classes' order
(``forward_edges``) is then a DAG whose ideals the DP enumerates and in which the IP keeps each device's set
convex. Elsewhere (non-contiguous splits, the partitioner's latency and batch plans) the classes are the
units themselves, so a task between a group's members may run on another device.
A *device class* is a group of identical devices (type, memory, host or not, link); pipeline loads under
host-staged transfers depend only on the node set a device holds, which is what makes the DP exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from ...errors import InputError
from ...problem import Problem


@dataclass(frozen=True)
class Contracted:
    problem: Problem
    merge_trivial: bool = False  # merge free dangling classes into their one neighbour (exact; fewer ideals)
    # fuse the units on a cycle of the stage order into one class: what a contiguous split needs; without it
    # (non-contiguous splits, latency, batches) a co-location group and a task on a path between its members
    # may lie on different devices, and the class graph may have cycles
    fuse_cycles: bool = True

    @cached_property
    def class_of(self) -> dict[str, int]:
        order = self.problem.stage_order
        g = nx.DiGraph()
        g.add_nodes_from(order.units)
        g.add_edges_from(order.edges)
        position = {u: k for k, u in enumerate(order.units)}
        if self.fuse_cycles:  # a cycle's units share a device: one class, named by its first unit
            fused = {u: min(scc, key=position.get) for scc in nx.strongly_connected_components(g) for u in scc}
        else:
            fused = {u: u for u in order.units}
        names: dict[str, int] = {}
        out = {t: names.setdefault(fused[u], len(names))
               for t in self.problem.graph.topological_order for u in (order.unit_of[t],)}
        if self.merge_trivial:
            out = self._merge_trivial(out)
        return out

    def _merge_trivial(self, out: dict[str, int]) -> dict[str, int]:
        """Merge a class into its only neighbouring class when it costs nothing: zero time everywhere, may run
        on every device, and its memory is zero or no memory limit can bind. Every plan that puts it elsewhere
        pays transfers it could save, and moving it to its neighbour keeps a contiguous split contiguous (its
        tasks lie on no path between other classes), so the optimum is unchanged. NeurIPS graphs are full of
        such dangling zero-cost nodes; each one alone can double the number of ideals."""
        problem = self.problem
        graph, platform = problem.graph, problem.platform
        every = {d.name for d in platform.devices}
        total_memory = sum(t.memory_bytes for t in graph.tasks)
        memory_free = total_memory <= min(d.memory_bytes for d in platform.devices)
        merged = dict(out)
        members: dict[int, list[str]] = {}
        for t, c in merged.items():
            members.setdefault(c, []).append(t)

        free_task = {t.id: (memory_free or t.memory_bytes == 0) and set(problem.allowed_devices[t.id]) >= every
                     and all(problem.time(t.id, d) == 0 for d in every) for t in graph.tasks}

        def free(c: int) -> bool:
            return all(free_task[t] for t in members[c])

        changed = True
        while changed:
            changed = False
            for c in list(members):
                if not free(c):
                    continue
                near = {merged[v] for t in members[c] for v in (*graph.successors[t], *graph.predecessors[t])} - {c}
                if len(near) != 1:
                    continue
                n = near.pop()
                for t in members.pop(c):
                    merged[t] = n
                    members[n].append(t)
                changed = True
        names: dict[int, int] = {}
        return {t: names.setdefault(c, len(names)) for t, c in merged.items()}

    @cached_property
    def num_classes(self) -> int:
        return max(self.class_of.values(), default=-1) + 1

    @cached_property
    def members(self) -> list[list[str]]:
        out: list[list[str]] = [[] for _ in range(self.num_classes)]
        for t, c in self.class_of.items():
            out[c].append(t)
        return out

    @cached_property
    def forward_edges(self) -> set[tuple[int, int]]:
        """Class-level edges of the stage order (contiguity and ideals live there); a DAG where cycles are fused."""
        order, cls = self.problem.stage_order, self.class_of
        first = {u: ts[0] for u, ts in order.units.items()}
        edges = {(cls[first[a]], cls[first[b]]) for a, b in order.edges}
        return {(a, b) for a, b in edges if a != b}

    @cached_property
    def topological_order(self) -> list[int]:
        """The classes in a topological order of :attr:`forward_edges` (smallest class first among the ready
        ones): a run of it is a convex set, a contiguous stage."""
        graph = nx.DiGraph()
        graph.add_nodes_from(range(self.num_classes))
        graph.add_edges_from(self.forward_edges)
        return list(nx.lexicographical_topological_sort(graph))

    @cached_property
    def producers(self) -> list[tuple[str, int, frozenset[int]]]:
        """(task, its class, classes of its consumers other than its own) for tasks whose output leaves."""
        graph = self.problem.graph
        cls = self.class_of
        out = []
        for t in graph.topological_order:
            consumers = frozenset(cls[v] for v in graph.successors[t]) - {cls[t]}
            if consumers:
                out.append((t, cls[t], consumers))
        return out


@dataclass(frozen=True)
class DeviceClass:
    devices: tuple[str, ...]
    type: str
    memory: float
    is_host: bool


def device_classes(problem: Problem) -> list[DeviceClass]:
    """Identical devices grouped; the DP needs host-staged transfers on one server."""
    platform = problem.platform
    if platform.peer_links or len({d.server for d in platform.devices}) > 1:
        raise InputError("the pipeline DP needs transfers staged through one host (no peer links, one server): "
                         "use --solver ip")
    buckets: dict[tuple, list[str]] = {}
    for d in platform.devices:
        buckets.setdefault((d.type, d.memory_bytes, d.is_host, d.link, d.handoff), []).append(d.name)
    return [DeviceClass(tuple(names), key[0], key[1], key[2]) for key, names in buckets.items()]


def class_times(problem: Problem, contracted: Contracted, dc: DeviceClass) -> list[float]:
    """Compute time of each class on a device of ``dc`` (inf where a member may not run there)."""
    probe = dc.devices[0]
    out = []
    for members in contracted.members:
        if all(probe in problem.allowed_devices[t] for t in members):
            out.append(sum(problem.time(t, probe) for t in members))
        else:
            out.append(math.inf)
    return out
