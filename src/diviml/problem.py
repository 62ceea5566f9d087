"""Problem = TaskGraph + Platform + Objective. The one object every solver receives."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

from .batch_table import pricing_sizes
from .errors import InfeasibleError, InputError
from .graph import TaskGraph
from .platform import Platform

OBJECTIVES = ("latency", "batch", "pipeline", "call-latency")
# the most requests a batch objective takes: the largest batch every solver was timed at against its limit (resnet50
# and googlenet on paper-server, a 200-task graph on six-servers); a batch of a billion once ran past any limit
MAX_BATCH = 4096
TRAINING_OBJECTIVES = ("pipedream", "gpipe")


@dataclass(frozen=True)
class Objective:
    """What to minimise.

    - ``latency``: makespan of one request of the graph's batch size.
    - ``batch``: makespan of a batch of ``batch_size`` requests that may be split across devices
      (throughput = batch_size / makespan).
    - ``pipeline``: steady-state time per sample of a pipeline = max device load; for training graphs
      ``training`` picks PipeDream (max of forward+backward load) or GPipe (max forward + max backward).
      ``contiguous`` asks for stages that run in one order: each device's node set convex, and no two
      devices passing tensors both ways.
    - ``call-latency``: the NeurIPS 2020 latency model: each accelerator runs its node set as at most
      ``max_calls`` calls (inputs in, compute, outputs out), one after another; host CPU tasks run as soon
      as their inputs are ready, with unbounded parallelism.
    """

    kind: str = "latency"
    batch_size: int | None = None
    training: str = "pipedream"
    contiguous: bool = False
    max_calls: int = 1

    def __post_init__(self):
        if self.kind not in OBJECTIVES:
            raise InputError(f"unknown objective {self.kind!r}: choose one of {', '.join(OBJECTIVES)}")
        if self.training not in TRAINING_OBJECTIVES:
            raise InputError(f"unknown training objective {self.training!r}: choose "
                             f"{' or '.join(TRAINING_OBJECTIVES)}")
        if self.max_calls < 1:
            raise InputError(f"calls per accelerator must be >= 1, got {self.max_calls}")
        if self.batch_size is not None and self.batch_size < 1:
            raise InputError(f"batch size must be >= 1, got {self.batch_size}")
        if self.batch_size is not None and self.batch_size > MAX_BATCH:
            raise InputError(f"batch size must be at most {MAX_BATCH}, got {self.batch_size}: schedule a batch of "
                             f"{MAX_BATCH} or fewer and run it as many times as needed")


@dataclass(frozen=True)
class StageOrder:
    """What "contiguous" means for a pipeline split (Tarnawski et al., NeurIPS 2020).

    A *unit* is a co-location group (all its tasks) or a task in none. Units holding a forward task are
    ordered by the forward edges between them. A unit with no forward task (a loss, a gradient accumulation
    without a colour class) stands in the order as a zero-cost forward node: each backward edge ``u -> v``
    that touches such a unit orders ``unit(v)`` before ``unit(u)`` (the mirror of the backward flow), so it
    may sit on any stage between its consumers' and its producers'. Backward edges between units that hold
    forward tasks add nothing (their forward twins are ordered already). A split is contiguous when every
    device's units form a convex set of this graph (no path leaves the set and re-enters it) and the sets,
    contracted, leave it acyclic: the stages run in one order, every tensor flowing forward.

    >>> from diviml import Task, TaskGraph, preset
    >>> t = {"cpu": 1.0, "v100": 1.0, "a100": 1.0}
    >>> g = TaskGraph.create([Task("f1", t, colocation="1"), Task("f2", t, colocation="2"),
    ...                       Task("b2", t, colocation="2", phase="backward"), Task("acc", t, phase="backward"),
    ...                       Task("b1", t, colocation="1", phase="backward")],
    ...                      [("f1", "f2"), ("f2", "b2"), ("b2", "acc"), ("acc", "b1")])
    >>> sorted(Problem(g, preset("paper-server"), Objective("pipeline")).stage_order.edges)
    [('g:1', 'g:2'), ('g:1', 't:acc'), ('t:acc', 'g:2')]
    """

    unit_of: dict[str, str]  # every task -> its unit
    edges: frozenset[tuple[str, str]]  # between units, each unit a node of the order

    @staticmethod
    def of(problem: "Problem") -> "StageOrder":
        graph = problem.graph
        groups = problem.colocation_groups
        unit_of = {t.id: f"g:{t.colocation}" if t.colocation in groups else f"t:{t.id}" for t in graph.tasks}
        has_forward = {unit_of[t.id] for t in graph.tasks if t.phase == "forward"}
        phase = {t.id: t.phase for t in graph.tasks}
        edges = set()
        for a, b in graph.edges:
            ua, ub = unit_of[a], unit_of[b]
            if ua == ub:
                continue
            if phase[a] == phase[b] == "forward":
                edges.add((ua, ub))
            elif phase[a] == phase[b] == "backward" and not (ua in has_forward and ub in has_forward):
                edges.add((ub, ua))
        return StageOrder(unit_of, frozenset(edges))

    @cached_property
    def units(self) -> dict[str, tuple[str, ...]]:
        """Each unit's tasks, units in the order their first task appears."""
        out: dict[str, list[str]] = {}
        for t, u in self.unit_of.items():
            out.setdefault(u, []).append(t)
        return {u: tuple(ts) for u, ts in out.items()}


@dataclass(frozen=True)
class Problem:
    graph: TaskGraph
    platform: Platform
    objective: Objective = Objective()

    def __post_init__(self):
        self.graph.check_device_types(self.platform.device_types)
        if self.objective.kind == "batch" and self.batch_size > MAX_BATCH:  # the graph's own batch, by default
            raise InputError(f"the batch objective takes at most {MAX_BATCH} requests, and this graph's batch size "
                             f"is {self.graph.batch_size}: give --batch {MAX_BATCH} or fewer")
        self._check_memory_and_colocation()

    @cached_property
    def batch_size(self) -> int:
        """Requests in one batch for the ``batch`` objective (the graph's batch size otherwise)."""
        if self.objective.kind == "batch":
            return self.objective.batch_size or max(8, self.graph.batch_size)
        return self.graph.batch_size

    @cached_property
    def is_training(self) -> bool:
        return any(t.phase == "backward" for t in self.graph.tasks)

    @cached_property
    def allowed_devices(self) -> dict[str, tuple[str, ...]]:
        """Devices each task may run on (type known, allowed, and its memory alone fits)."""
        out = {}
        for t in self.graph.tasks:
            devs = tuple(d.name for d in self.platform.devices
                         if t.can_run_on(d.type) and t.memory_bytes <= d.memory_bytes)
            out[t.id] = devs
        return out

    @cached_property
    def whole_batch(self) -> frozenset[str]:
        """Tasks a batch plan must run on the whole batch at once (``Task.whole_batch``: they mix samples)."""
        return frozenset(t.id for t in self.graph.tasks if t.whole_batch)

    @cached_property
    def colocation_groups(self) -> dict[str, tuple[str, ...]]:
        groups: dict[str, list[str]] = {}
        for t in self.graph.tasks:
            if t.colocation is not None:
                groups.setdefault(t.colocation, []).append(t.id)
        return {k: tuple(v) for k, v in groups.items() if len(v) > 1}

    @cached_property
    def stage_order(self) -> "StageOrder":
        """The graph a contiguous pipeline split must be convex in (see :class:`StageOrder`)."""
        return StageOrder.of(self)

    def pricing_sizes(self, task_id: str, device: str, lo: int = 1, hi: int | None = None) -> tuple[int, ...]:
        """The part sizes in ``lo..hi`` (default: up to the batch) where ``task_id``'s least time on ``device``
        over that range, and its least time per sample, lie (see :func:`~diviml.batch_table.pricing_sizes`)."""
        return pricing_sizes(self.graph.by_id[task_id], self.platform.by_name[device].type, self.graph.batch_size,
                             lo, self.batch_size if hi is None else hi)

    def time(self, task_id: str, device: str, batch: int | None = None) -> float:
        key = (task_id, self.platform.by_name[device].type, batch)  # devices of one type share their times
        value = self._times.get(key)
        if value is None:
            value = self._times[key] = self.graph.time_at(task_id, key[1], batch)
        return value

    def transfer(self, task_id: str, src: str, dst: str, scale: float = 1.0) -> float:
        """Time for ``scale`` x the output of ``task_id`` to go from device ``src`` to ``dst``."""
        key = (task_id, src, dst, scale)
        value = self._transfers.get(key)
        if value is None:
            value = self._transfers[key] = self.platform.transfer_time(self.graph.by_id[task_id], src, dst, scale)
        return value

    # memos of time() and transfer(): the solvers ask for the same few values hundreds of thousands of times
    # (MILP-SPLIT's module models, HEFT, the simulator), each a table lookup with interpolation or link sums
    @cached_property
    def _times(self) -> dict:
        return {}

    @cached_property
    def _transfers(self) -> dict:
        return {}

    def _check_memory_and_colocation(self) -> None:
        for t in self.graph.tasks:
            if not self.allowed_devices[t.id]:
                fits = [d.name for d in self.platform.devices if t.can_run_on(d.type)]
                raise InfeasibleError(
                    f"task {t.id!r} needs {t.memory_bytes:.4g} bytes but no device it may run on ({fits}) has "
                    "that much memory: raise the memory limit or choose a larger device")
        for name, members in self.colocation_groups.items():
            common = set(self.allowed_devices[members[0]])
            for m in members[1:]:
                common &= set(self.allowed_devices[m])
            need = sum(self.graph.by_id[m].memory_bytes for m in members)
            common = {d for d in common if self.platform.by_name[d].memory_bytes >= need}
            if not common:
                raise InfeasibleError(f"co-location group {name!r} ({len(members)} tasks) fits on no single device "
                                      "(allowed types or memory): relax the group or the memory limit")
        total = sum(t.memory_bytes for t in self.graph.tasks)
        capacity = sum(d.memory_bytes for d in self.platform.devices)
        if total > capacity:
            raise InfeasibleError(f"the graph needs {total:.4g} bytes of memory but all devices together hold "
                                  f"{capacity:.4g}: raise the memory limit or add devices")
        self._check_confined_memory()

    def _check_confined_memory(self) -> None:
        """Tasks that may run only within a set of devices (their types, memory) must fit those devices'
        memory together: checked for each set some task is confined to (a handful), so that the user hears
        which tasks and devices, not an exact solver's bare "infeasible"."""
        need = [(frozenset(self.allowed_devices[t.id]), t.memory_bytes, t.id) for t in self.graph.tasks
                if t.memory_bytes > 0]
        by_name = self.platform.by_name
        for devices in {d for d, _, _ in need}:
            held = sum(by_name[d].memory_bytes for d in devices)
            inside = [(m, t) for d, m, t in need if d <= devices]
            needed = sum(m for m, _ in inside)
            if math.isfinite(held) and needed > held * (1 + 1e-5):  # above the validator's tolerance
                names = ", ".join(repr(t) for _, t in sorted(inside, reverse=True)[:4])
                raise InfeasibleError(
                    f"tasks {names}{' ...' if len(inside) > 4 else ''} ({len(inside)} in all) may run only on "
                    f"{', '.join(sorted(devices))} and need {needed:.4g} bytes, more than the "
                    f"{held:.4g} those devices hold: raise the memory limit or let the tasks run elsewhere")


def whole_tasks(problem: Problem) -> Problem:
    """The latency problem whose plans are ``problem``'s batch plans that run every task whole: each task takes
    the batch's time (its batch table at the batch size) and its output is the batch's rows; memory, allowed
    types and co-location as they are. The simulator gives a placement the same makespan in both, so this
    problem's optimum (and any bound of it) is the best a batch plan can do without cutting a task into parts;
    a batch plan that runs every task whole and meets it is optimal among those plans, and the batch
    objective's bound says how much splitting tasks could gain at most.

    >>> from diviml import Device, Platform, Task
    >>> task = Task("a", {"gpu": 1.0}, output_bytes=4.0, time_by_batch={"gpu": {8: 2.0}})
    >>> gpu = Platform((Device("g", "gpu", 1e9, is_host=True),))
    >>> w = whole_tasks(Problem(TaskGraph.create([task], []), gpu, Objective("batch", 8)))
    >>> w.objective.kind, w.time("a", "g"), w.graph.by_id["a"].output_bytes
    ('latency', 2.0, 32.0)
    """
    if problem.objective.kind != "batch":
        raise InputError(f"whole_tasks takes a batch problem, not {problem.objective.kind}")
    graph, n = problem.graph, problem.batch_size
    scale = n / graph.batch_size
    tasks = [replace(t, time={dt: graph.time_at(t.id, dt, n) for dt in t.time}, time_by_batch={},
                     output_bytes=t.output_bytes * scale,
                     transfer_time=None if t.transfer_time is None else t.transfer_time * scale)
             for t in graph.tasks]
    whole = TaskGraph.create(tasks, graph.edges, name=f"{graph.name} (batch of {n}, tasks whole)",
                             time_unit=graph.time_unit, batch_size=1)
    return Problem(whole, problem.platform, Objective("latency"))
