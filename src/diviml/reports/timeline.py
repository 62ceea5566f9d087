"""A plan as a timeline to draw: a bar per job, the transfers between devices, the critical path, bars under
a pixel merged, and the colours (by sub-batch or by module). The pictures of :mod:`.gantt` read it."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

from ..plan import Plan
from ..problem import Problem

TOL = 1e-9
PLOT_PIXELS = 1100  # the PNG/SVG time axis, about (12 in at 120 dpi, less the labels and legend)
MAX_TRANSFER_LINES = 2000  # beyond this many, a PNG/SVG draws only the transfers at least a pixel long
SUMMARY = "#9e9e9e"


@dataclass(frozen=True)
class Bar:
    device: str
    task: str
    start: float
    finish: float
    batch: int
    critical: bool
    part: int = 0  # which of the task's sub-batches (0 for a task not split)
    module: str = ""


@dataclass(frozen=True)
class Transfer:
    task: str
    src: str
    dst: str
    start: float
    finish: float


@dataclass(frozen=True)
class Summary:
    """Consecutive bars of one device too narrow to draw apart, drawn as one."""
    device: str
    start: float
    finish: float
    count: int
    busy: float  # the time its bars cover
    critical: bool  # some of its bars are on the critical path


@dataclass(frozen=True)
class Row:
    """A device's row in a picture: its server, and the bytes the plan keeps on it against its memory."""
    device: str
    type: str
    server: str
    held: float
    capacity: float

    @property
    def label(self) -> str:
        return f"{self.device} ({self.type})"

    @property
    def memory(self) -> str:
        """'31.4 GB of 40 GB (79%)', or '31.4 GB' where the memory is unbounded."""
        if self.capacity == float("inf"):
            return size(self.held)
        share = self.held / self.capacity if self.capacity > 0 else 0.0
        return f"{size(self.held)} of {size(self.capacity)} ({share:.0%})"


def size(nbytes: float) -> str:
    """Bytes in the unit that reads best: '512 B', '3.5 MB', '31.4 GB', '2 TB'."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.3g} B"


def device_rows(plan: Plan, problem: Problem) -> list[Row]:
    """The devices server by server (the platform's order within each) with what the plan holds on each: a
    cluster's 26 GPUs and CPUs read under their servers, beside the memory that decided where layers went."""
    platform, graph = problem.platform, problem.graph
    held = {d.name: 0.0 for d in platform.devices}
    for task, parts in plan.parts.items():
        for device in {d for d, _ in parts}:
            held[device] += graph.by_id[task].memory_bytes
    servers = list(dict.fromkeys(d.server for d in platform.devices))
    ordered = sorted(platform.devices, key=lambda d: servers.index(d.server))
    return [Row(d.name, d.type, d.server, held[d.name], d.memory_bytes) for d in ordered]


def summarised(bars: list[Bar], end: float, pixels: float) -> list[Bar | Summary]:
    """``bars`` for a drawing ``pixels`` wide over ``[0, end]``: a bar narrower than a pixel joins the
    neighbours on its device that are too (closer than a pixel apart) into one :class:`Summary`, outlined
    where it holds critical-path bars (as the page does); wider bars are kept as they are.

    >>> tiny = [Bar("gpu", f"t{i}", i * 0.001, i * 0.001 + 0.0009, 1, False) for i in range(100)]
    >>> [type(b).__name__ for b in summarised(tiny + [Bar("gpu", "big", 0.1, 1.0, 1, True)], 1.0, 1000)]
    ['Summary', 'Bar']
    """
    px = end / pixels if pixels > 0 and end > 0 else 0.0
    out: list[Bar | Summary] = []
    by_device: dict[str, list[Bar]] = {}
    for b in bars:
        by_device.setdefault(b.device, []).append(b)
    for device, row in by_device.items():
        run: list[Bar] = []

        def flush() -> None:
            if len(run) == 1:
                out.append(run[0])
            elif run:
                out.append(Summary(device, run[0].start, max(b.finish for b in run), len(run),
                                   sum(b.finish - b.start for b in run), any(b.critical for b in run)))
            run.clear()

        for b in sorted(row, key=lambda b: b.start):
            narrow = b.finish - b.start < px
            if narrow and run and b.start - run[-1].finish < px:
                run.append(b)
                continue
            flush()
            if narrow:
                run.append(b)
            else:
                out.append(b)
        flush()
    return out


def bars_and_transfers(plan: Plan, problem: Problem) -> tuple[list[Bar], list[Transfer]]:
    """The plan's bars and the transfers between devices. Parts of a split task cover consecutive rows of the
    batch in the order listed (as :mod:`diviml.simulate` reads them): a part receives from each producer part
    only the rows it overlaps, once per device."""
    graph = problem.graph
    if plan.objective_kind == "call-latency":  # one bar per accelerator call or host task
        from ..simulate import call_latency
        calls = call_latency(problem, plan.placement).calls
        last = max(calls, key=lambda c: c.finish) if calls else None
        return [Bar(c.device, c.tasks[0] if len(c.tasks) == 1 else f"{len(c.tasks)} tasks from {c.tasks[0]}",
                    c.start, c.finish, plan.batch_size, c is last) for c in calls], []
    jobs: list[_Job] = []
    rows_of: dict[str, int] = {}
    by_task: dict[str, list[_Job]] = {}
    for a in plan.assignments:
        b = a.batch or plan.batch_size
        start = a.start or 0.0  # latency and batch plans carry every start
        job = _Job(a.task, a.device, start, start + problem.time(a.task, a.device, b), b, len(by_task.get(a.task, ())),
                   rows_of.get(a.task, 0))
        rows_of[a.task] = job.offset + b
        jobs.append(job)
        by_task.setdefault(a.task, []).append(job)
    if problem.platform.transfers == "receiver":  # the receiver spends each transfer before the job computes
        jobs, by_task, transfers = _received(problem, jobs, by_task)
    else:
        transfers = _overlapped(problem, by_task)
    critical = critical_path(problem, jobs, by_task)
    bars = [Bar(j.device, j.task, j.start, j.finish, j.batch, id(j) in critical, j.part, graph.by_id[j.task].module or "")
            for j in jobs]
    return bars, transfers


def _overlapped(problem: Problem, by_task: dict[str, list[_Job]]) -> list[Transfer]:
    """Each producer part's transfers, from its finish: to each other device, the rows of it read there."""
    graph = problem.graph
    transfers = []
    for u in graph.topological_order:
        for j in by_task[u]:
            rows: dict[str, set[int]] = {}  # destination device -> rows of this part it needs
            for v in graph.successors[u]:
                for c in by_task[v]:
                    if c.device != j.device:
                        rows.setdefault(c.device, set()).update(range(max(j.offset, c.offset),
                                                                      min(j.offset + j.batch, c.offset + c.batch)))
            for dst in sorted(rows):
                if rows[dst]:
                    dt = problem.transfer(u, j.device, dst, len(rows[dst]) / graph.batch_size)
                    if dt > 0:
                        transfers.append(Transfer(u, j.device, dst, j.finish, j.finish + dt))
    return transfers


def _received(problem: Problem, jobs: list[_Job], by_task: dict[str, list[_Job]]
              ) -> tuple[list[_Job], dict[str, list[_Job]], list[Transfer]]:
    """On a 'receiver' platform, the jobs as the simulator times the plan's device order (each from its start to
    the end of its compute, its device receiving its inputs first) and the receives, one after another."""
    from ..simulate import schedule
    parts = {t: [(j.device, j.batch) for j in js] for t, js in by_task.items()}
    order: dict[str, list[tuple[str, int]]] = {d.name: [] for d in problem.platform.devices}
    for k in sorted(range(len(jobs)), key=lambda k: (jobs[k].start, k)):
        order[jobs[k].device].append((jobs[k].task, jobs[k].part))
    timed = {(j.task, j.offset): j for j in schedule(problem, parts, order).jobs}
    fitted, transfers = [], []
    fitted_by_task: dict[str, list[_Job]] = {}
    for j in jobs:
        sim = timed[j.task, j.offset]
        at = sim.start
        for u, src, seconds in sim.received:
            transfers.append(Transfer(u, src, j.device, at, at + seconds))
            at += seconds
        fitted.append(replace(j, start=sim.start, finish=sim.finish))
        fitted_by_task.setdefault(j.task, []).append(fitted[-1])
    return fitted, fitted_by_task, transfers


@dataclass(frozen=True, eq=False)
class _Job:
    task: str
    device: str
    start: float
    finish: float
    batch: int
    part: int
    offset: int  # the part's first row of the batch


def critical_path(problem: Problem, jobs: list[_Job], by_task: dict[str, list[_Job]]) -> set[int]:
    """ids of the jobs on a chain, from the last to finish back to time 0, each started exactly when its
    binding input arrived or its device freed; never visiting a job twice (zero-time jobs finish where they
    start)."""
    graph = problem.graph
    if not jobs:
        return set()
    per_device: dict[str, list[_Job]] = {}  # by finish, for a bisection: the walk stays near-linear
    for j in sorted(jobs, key=lambda j: j.finish):
        per_device.setdefault(j.device, []).append(j)
    finishes = {d: [j.finish for j in js] for d, js in per_device.items()}
    current = max(jobs, key=lambda j: j.finish)
    visited = {id(current)}
    receiving = problem.platform.transfers == "receiver"  # an input binds as its producer finishes
    while current.start > TOL:
        lo, hi = current.offset, current.offset + current.batch
        close = 1e-9 * max(1.0, current.start)
        nxt = None
        for u in graph.predecessors[current.task]:
            for j in by_task[u]:
                overlap = min(hi, j.offset + j.batch) - max(lo, j.offset)
                delay = 0.0 if receiving else problem.transfer(u, j.device, current.device, overlap / graph.batch_size)
                if overlap > 0 and id(j) not in visited and abs(j.finish + delay - current.start) <= close:
                    nxt = j
        if nxt is None:  # the job before it on its device, finishing as it starts
            mine, ends = per_device[current.device], finishes[current.device]
            k = bisect.bisect_right(ends, current.start + close) - 1
            while k >= 0 and ends[k] >= current.start - close and nxt is None:
                if id(mine[k]) not in visited:
                    nxt = mine[k]
                k -= 1
        if nxt is None:
            break
        visited.add(id(nxt))
        current = nxt
    return visited


PALETTE = ("#4c78a8", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d", "#bab0ac", "#e45756",
           "#79706e")
TRANSFER = "#f58518"
LEGEND_MAX = 12  # at most this many colours named in a legend


def colouring(bars: list[Bar]) -> tuple[str, dict[str, str]]:
    """What the colours stand for (``sub-batch`` where any task is split, else ``module``, else nothing)
    and the colour of each key (:func:`colour_key`)."""
    by = "sub-batch" if any(b.part for b in bars) else "module" if any(b.module for b in bars) else ""
    keys = list(dict.fromkeys(colour_key(b, by) for b in bars))
    return by, {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(keys)}


def colour_key(bar: Bar, by: str) -> str:
    if by == "sub-batch":
        return f"part {bar.part + 1}"
    if by != "module":
        return "task"
    top = bar.module.split(".")[0]
    return "(outside any module)" if not top or top.startswith("_empty_nn_module_stack") else top
