"""What the pipeline (max-load) solvers share: nodes contracted into co-location classes, device classes.

A *class* is a co-location group (in NeurIPS graphs: a colour class, a forward node with its backward
twins) or a single task. Backward tasks outside any group follow a neighbour: the class of their first
producer, else of their first consumer (they must sit somewhere; their twin relation is implied); they are visited from the output back, so a chain of them follows its end.
Classes with no forward task (losses flagged backward) have no place in the forward order: the DP places
them freely, which multiplies the ideals; ``attach_isolated`` merges them into a neighbour instead.
A *device class* is a group of identical devices (type, memory, host or not, link); pipeline loads under
host-staged transfers depend only on the node set a device holds, which is what makes the DP exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ..errors import InputError
from ..problem import Problem


@dataclass(frozen=True)
class Contracted:
    problem: Problem
    attach_isolated: bool = False  # merge classes without forward tasks into a neighbour (fewer ideals)
    merge_trivial: bool = False  # merge free dangling classes into their one neighbour (exact; fewer ideals)

    @cached_property
    def class_of(self) -> dict[str, int]:
        graph = self.problem.graph
        names: dict[str, int] = {}
        out: dict[str, int] = {}
        for t in graph.topological_order:
            task = graph.by_id[t]
            if task.colocation in self.problem.colocation_groups:
                key = f"g:{task.colocation}"
            elif task.phase == "backward":
                continue
            else:
                key = f"t:{t}"
            out[t] = names.setdefault(key, len(names))
        for t in reversed(graph.topological_order):  # free backward tasks follow a consumer, else a producer
            if t in out:
                continue
            near = [v for v in graph.successors[t] if v in out] + [u for u in graph.predecessors[t] if u in out]
            out[t] = out[near[0]] if near else names.setdefault(f"t:{t}", len(names))
        if self.attach_isolated:
            out = self._attach_isolated(out)
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

    def _attach_isolated(self, out: dict[str, int]) -> dict[str, int]:
        """Merge classes with no forward task into a neighbouring class that has one (a restriction)."""
        graph = self.problem.graph
        forward = {out[t.id] for t in graph.tasks if t.phase == "forward"}
        merged = dict(out)
        for t in reversed(graph.topological_order):
            c = merged[t]
            if c in forward:
                continue
            near = [merged[v] for v in graph.successors[t] if merged[v] in forward]
            near += [merged[u] for u in graph.predecessors[t] if merged[u] in forward]
            if near:
                merged = {x: (near[0] if k == c else k) for x, k in merged.items()}
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
        """Class-level edges of the forward graph (contiguity and ideals live there)."""
        graph = self.problem.graph
        cls = self.class_of
        fwd = {t.id for t in graph.tasks if t.phase == "forward"}
        return {(cls[a], cls[b]) for a, b in graph.edges if a in fwd and b in fwd and cls[a] != cls[b]}

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
        buckets.setdefault((d.type, d.memory_bytes, d.is_host, d.link), []).append(d.name)
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
