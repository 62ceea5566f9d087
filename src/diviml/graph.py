"""TaskGraph: the DAG of operators with per-device-type costs, and its versioned JSON schema.

Schema ``diviml.graph/1`` (all times in ``time_unit``, seconds unless an importer says otherwise)::

    {"schema": "diviml.graph/1", "name": str, "time_unit": "s", "batch_size": 1,
     "tasks": [{"id": str, "kind": str, "time": {device_type: t},
                "time_by_batch": {device_type: {batch: t}},      # optional
                "flops": float, "bytes_accessed": float,           # optional
                "memory_bytes": float, "output_bytes": float,
                "transfer_time": float,                            # optional, overrides links
                "colocation": str, "allowed_types": [str],         # optional
                "phase": "forward" | "backward", "module": str,    # optional
                "whole_batch": true}],                             # optional (default false)
     "edges": [[src_id, dst_id], ...]}

``output_bytes`` and ``time`` are for the graph's ``batch_size``. ``transfer_time`` is the time of one
hop (device <-> host) of the task's output, used by the NeurIPS 2020 model where edge costs are times.
``whole_batch``: a batch plan never cuts the task into sub-batches, as its result for a sample depends on the
batch's other samples (:mod:`diviml.frontends.pytorch._samples` finds such tasks).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Hashable, Iterable, Mapping, Sequence, TypeVar

import networkx as nx

from .batch_table import time_at_batch
from .errors import InputError
from .files import read_json, write_text_atomic

SCHEMA = "diviml.graph/1"
GRAPH_FIELDS = ("schema", "name", "time_unit", "batch_size", "tasks", "edges")
TASK_FIELDS = ("id", "kind", "time", "time_by_batch", "flops", "bytes_accessed", "memory_bytes", "output_bytes",
               "transfer_time", "colocation", "allowed_types", "phase", "module", "whole_batch")
Node = TypeVar("Node", bound=Hashable)  # what longest_paths walks: task ids, jobs, units


@dataclass(frozen=True)
class Task:
    """One operator (or layer) of the network."""

    id: str
    time: Mapping[str, float]
    kind: str = "op"
    time_by_batch: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    flops: float | None = None
    bytes_accessed: float | None = None
    memory_bytes: float = 0.0
    output_bytes: float = 0.0
    transfer_time: float | None = None
    colocation: str | None = None
    allowed_types: frozenset[str] | None = None
    phase: str = "forward"
    module: str | None = None
    whole_batch: bool = False  # never cut into sub-batches: its result for a sample depends on other samples

    def can_run_on(self, device_type: str) -> bool:
        if device_type not in self.time:
            return False
        return self.allowed_types is None or device_type in self.allowed_types


@dataclass(frozen=True)
class TaskGraph:
    """A DAG of tasks. Build it with :meth:`create`, which checks it."""

    tasks: tuple[Task, ...]
    edges: tuple[tuple[str, str], ...]
    name: str = "graph"
    time_unit: str = "s"
    batch_size: int = 1

    @staticmethod
    def create(tasks: Iterable[Task], edges: Iterable[tuple[str, str]], *, name: str = "graph",
               time_unit: str = "s", batch_size: int = 1) -> "TaskGraph":
        graph = TaskGraph(tuple(tasks), tuple((str(a), str(b)) for a, b in edges), name, time_unit,
                          int(batch_size))
        graph.check()
        return graph

    # -- structure -------------------------------------------------------------------------------
    @cached_property
    def index(self) -> dict[str, int]:
        return {t.id: i for i, t in enumerate(self.tasks)}

    @cached_property
    def by_id(self) -> dict[str, Task]:
        return {t.id: t for t in self.tasks}

    @cached_property
    def successors(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {t.id: [] for t in self.tasks}
        for a, b in self.edges:
            out[a].append(b)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def predecessors(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {t.id: [] for t in self.tasks}
        for a, b in self.edges:
            out[b].append(a)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def nx(self) -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_nodes_from(t.id for t in self.tasks)
        g.add_edges_from(self.edges)
        return g

    @cached_property
    def topological_order(self) -> tuple[str, ...]:
        """A deterministic topological order (ties broken by position in the file)."""
        return tuple(nx.lexicographical_topological_sort(self.nx, key=self.index.__getitem__))

    @cached_property
    def device_types(self) -> frozenset[str]:
        return frozenset(dt for t in self.tasks for dt in t.time)

    def __len__(self) -> int:
        return len(self.tasks)

    def subgraph(self, ids: Sequence[str], name: str) -> "TaskGraph":
        """The tasks ``ids`` (in that order) and the edges between them, timed as here (the same time unit and
        batch size: a task's times are read at this graph's batch)."""
        inside = set(ids)
        return TaskGraph.create([self.by_id[t] for t in ids],
                                [(u, v) for u in ids for v in self.successors[u] if v in inside],
                                name=name, time_unit=self.time_unit, batch_size=self.batch_size)

    # -- checks ----------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise InputError naming the first problem found; silent for a sound graph."""
        if not self.tasks:
            raise InputError("the graph has no tasks: give at least one")
        seen: set[str] = set()
        for t in self.tasks:
            if not t.id:
                raise InputError("a task has an empty id: give every task a unique non-empty 'id'")
            if t.id in seen:
                raise InputError(f"duplicate task id {t.id!r}: task ids must be unique")
            seen.add(t.id)
            if not t.time:
                raise InputError(f"task {t.id!r} has no time on any device type: add a 'time' entry")
            fields = [(f"time.{k}", v) for k, v in t.time.items()]
            fields += [(f"time_by_batch.{k}", v) for k, tb in t.time_by_batch.items() for v in tb.values()]
            fields += [("memory_bytes", t.memory_bytes), ("output_bytes", t.output_bytes)]
            fields += [(name, v) for name, v in (("transfer_time", t.transfer_time), ("flops", t.flops),
                                                 ("bytes_accessed", t.bytes_accessed)) if v is not None]
            for name, v in fields:
                if not isinstance(v, (int, float)) or math.isnan(v) or v < 0 or math.isinf(v) or v > LARGEST:
                    raise InputError(f"task {t.id!r}: {name} is {v!r}, a negative, infinite, NaN or too large "
                                     f"value: it must be a finite number >= 0, at most {LARGEST:g}")
            if t.allowed_types is not None and not any(t.can_run_on(d) for d in t.time):
                raise InputError(f"task {t.id!r} may run on {sorted(t.allowed_types)} but has times only "
                                 f"for {sorted(t.time)}: give it a time on an allowed device type")
            if t.phase not in ("forward", "backward"):
                raise InputError(f"task {t.id!r} has phase {t.phase!r}: use 'forward' or 'backward'")
        if self.batch_size < 1:
            raise InputError(f"batch_size {self.batch_size} must be >= 1")
        for a, b in self.edges:
            for end in (a, b):
                if end not in seen:
                    raise InputError(f"edge {a!r} -> {b!r} names unknown task {end!r}: "
                                     "every edge must join two declared tasks")
            if a == b:
                raise InputError(f"edge {a!r} -> {b!r} is a self-loop: the graph must be acyclic")
        if nx.is_directed_acyclic_graph(self.nx):  # linear; find_cycle is much slower on a large DAG
            return
        cycle = nx.find_cycle(self.nx)
        names = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
        raise InputError(f"the graph has a cycle: {names}; a task graph must be acyclic")

    def check_device_types(self, known: Iterable[str]) -> None:
        """Every task must be able to run on at least one device type the platform has."""
        known = set(known)
        unknown = sorted(self.device_types - known)
        for t in self.tasks:
            if not any(t.can_run_on(d) for d in known):
                raise InputError(
                    f"task {t.id!r} can run only on {sorted(d for d in t.time if t.can_run_on(d))}, "
                    f"which the platform lacks (it has {sorted(known)}); "
                    f"choose a platform with those device types" +
                    (f" (unknown types in the graph: {unknown})" if unknown else ""))

    # -- costs -----------------------------------------------------------------------------------
    def time_at(self, task_id: str, device_type: str, batch: int | None = None) -> float:
        """Time of a task on a device type for a batch (interpolated from the table where missing)."""
        return time_at_batch(self.by_id[task_id], device_type, batch or self.batch_size, self.batch_size)[0]

    # -- JSON ------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        tasks = []
        for t in self.tasks:
            d: dict = {"id": t.id, "kind": t.kind, "time": dict(t.time)}
            if t.time_by_batch:
                d["time_by_batch"] = {k: {str(b): v for b, v in tb.items()} for k, tb in t.time_by_batch.items()}
            for key in ("flops", "bytes_accessed", "transfer_time", "colocation", "module"):
                if getattr(t, key) is not None:
                    d[key] = getattr(t, key)
            d["memory_bytes"] = t.memory_bytes
            d["output_bytes"] = t.output_bytes
            if t.allowed_types is not None:
                d["allowed_types"] = sorted(t.allowed_types)
            if t.phase != "forward":
                d["phase"] = t.phase
            if t.whole_batch:
                d["whole_batch"] = True
            tasks.append(d)
        return {"schema": SCHEMA, "name": self.name, "time_unit": self.time_unit,
                "batch_size": self.batch_size, "tasks": tasks, "edges": [list(e) for e in self.edges]}

    @staticmethod
    def from_dict(data: Mapping) -> "TaskGraph":
        if not isinstance(data, Mapping):
            raise InputError("a diviml graph must be a JSON object with 'tasks' and 'edges'")
        schema = data.get("schema", SCHEMA)
        if schema != SCHEMA:
            raise InputError(f"unsupported graph schema {schema!r}: this diviml reads {SCHEMA!r}")
        if not isinstance(data.get("tasks"), list) or not isinstance(data.get("edges"), list):
            raise InputError("a diviml graph needs 'tasks' and 'edges' lists")
        known_fields(data, GRAPH_FIELDS, "the graph")
        tasks = []
        for i, d in enumerate(data["tasks"]):
            if isinstance(d, Mapping):
                known_fields(d, TASK_FIELDS, f"task {d.get('id', f'#{i}')!r}")
            try:
                tbb = {str(k): {_batch_size(b): _num(v) for b, v in tb.items()}
                       for k, tb in d.get("time_by_batch", {}).items()}
                allowed = d.get("allowed_types")
                tasks.append(Task(
                    id=str(d["id"]), kind=str(d.get("kind", "op")),
                    time={str(k): _num(v) for k, v in d["time"].items()}, time_by_batch=tbb,
                    flops=_opt(d.get("flops")), bytes_accessed=_opt(d.get("bytes_accessed")),
                    memory_bytes=_num(d.get("memory_bytes", 0.0)), output_bytes=_num(d.get("output_bytes", 0.0)),
                    transfer_time=_opt(d.get("transfer_time")), colocation=_optstr(d.get("colocation")),
                    allowed_types=frozenset(map(str, allowed)) if allowed is not None else None,
                    phase=str(d.get("phase", "forward")), module=_optstr(d.get("module")),
                    whole_batch=_flag(d.get("whole_batch", False), f"task {d['id']!r}: whole_batch")))
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
                raise InputError(f"task #{i} is malformed ({exc.__class__.__name__}: {exc}): each task needs "
                                 "an 'id' and a 'time' object of device type -> number") from None
        try:
            edges = [(str(a), str(b)) for a, b in data["edges"]]
        except (TypeError, ValueError):
            raise InputError("'edges' must be a list of [source_id, destination_id] pairs") from None
        return TaskGraph.create(tasks, edges, name=str(data.get("name", "graph")),
                                time_unit=str(data.get("time_unit", "s")),
                                batch_size=whole_number(data.get("batch_size", 1), "batch_size"))

    def save(self, path: str | Path) -> None:
        write_text_atomic(path, json.dumps(self.to_dict(), indent=1))

    @staticmethod
    def load(path: str | Path) -> "TaskGraph":
        return TaskGraph.from_dict(read_json(path))


def longest_paths(order: Iterable[Node], predecessors: Callable[[Node], Iterable[Node]],
                  cost: Callable[[Node], float], *, edge: Callable[[Node, Node], float] | None = None,
                  release: Callable[[Node], float] | None = None) -> dict[Node, float]:
    """The length of the longest path ending at each node, its own ``cost`` included: ``cost(v)`` after the
    latest of ``release(v)`` (default 0) and each predecessor's length plus ``edge(u, v)`` (default 0). Nodes
    come in ``order``, a topological order of ``predecessors``; pass the reversed order and the successors for
    the longest path from each node to a sink. The one longest-path computation of diviml.

    >>> longest_paths("abc", {"a": "", "b": "a", "c": "ab"}.get, {"a": 1, "b": 2, "c": 3}.get)
    {'a': 1, 'b': 3, 'c': 6}
    """
    length: dict[Node, float] = {}
    for v in order:
        ready = release(v) if release else 0  # whole costs give whole lengths (CP-SAT's ticks)
        for u in predecessors(v):
            ready = max(ready, length[u] + edge(u, v) if edge else length[u])
        length[v] = cost(v) + ready
    return length


# No time, size or rate of a real model or machine comes near this; beyond it, sums of costs overflow.
LARGEST = 1e100


def known_fields(data: Mapping, fields: tuple[str, ...], what: str) -> None:
    """Refuse a field the schema does not have: a misspelt one would otherwise be left out silently (a task's
    'memory' read as no memory at all)."""
    unknown = sorted(map(str, set(data) - set(fields)))
    if unknown:
        raise InputError(f"{what}: unknown field(s) {', '.join(unknown)}; known: {', '.join(fields)}")


def _num(v) -> float:
    """A number from an input file: a JSON/YAML number (not a boolean) of magnitude at most LARGEST."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expected a number, got {v!r}")
    if isinstance(v, int) and abs(v) > LARGEST:
        raise ValueError(f"a number of {len(str(abs(v)))} digits is beyond {LARGEST:g}")
    if abs(v) > LARGEST:
        raise ValueError(f"{float(v):g} is beyond {LARGEST:g}")
    return float(v)


def whole_number(v, what: str, low: int = 1, high: int = 10 ** 6) -> int:
    """A whole number in [low, high] from an input file (an integral float is accepted), else InputError."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise InputError(f"{what} must be a whole number, got {v!r}")
    if not low <= v <= high:
        raise InputError(f"{what} must be between {low} and {high}, got {v!r}")
    return int(v)


def _flag(v, what: str) -> bool:
    """A JSON true or false, else InputError (a string "false" is not taken for true)."""
    if not isinstance(v, bool):
        raise InputError(f"{what} must be true or false, got {v!r}")
    return v


def _batch_size(key) -> int:
    """A batch size keying a task's ``time_by_batch`` table (JSON keys are strings: "8"), else ValueError."""
    size = int(key) if isinstance(key, str) else key
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"a time_by_batch batch size must be a whole number >= 1, got {key!r}")
    return size


def _opt(v) -> float | None:
    return None if v is None else _num(v)


def _optstr(v) -> str | None:
    return None if v is None else str(v)
