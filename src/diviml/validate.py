"""Independent plan validation: re-check every constraint and recompute the objective.

Nothing here trusts the solver: start times are re-checked against the transfer model, device overlap,
memory, co-location, device types and contiguity, and the objective is recomputed from the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import networkx as nx

from .errors import ValidationError
from .plan import Plan
from .problem import Problem
from .simulate import call_latency, pipeline_loads

REL_TOL = 1e-6
ABS_TOL = 1e-9


@dataclass(frozen=True)
class Report:
    violations: tuple[str, ...]
    objective: float | None  # recomputed; None when the plan is too broken to evaluate

    @property
    def ok(self) -> bool:
        return not self.violations


def _close_or_below(a: float, b: float) -> bool:
    """a <= b up to tolerance."""
    return a <= b + REL_TOL * max(abs(a), abs(b)) + ABS_TOL


def validate(plan: Plan, problem: Problem) -> Report:
    """Every way ``plan`` breaks ``problem`` (tasks and parts, devices, co-location, memory, contiguity, the
    objective recomputed from the plan, the bound below it, the status), and the objective recomputed."""
    v: list[str] = []
    kind = problem.objective.kind
    if plan.objective_kind != kind:
        v.append(f"plan is for objective {plan.objective_kind!r}, problem asks for {kind!r}")
    v += _coverage_violations(plan, problem)
    if v:
        return Report(tuple(v), None)
    v += _part_violations(plan, problem)
    if v:
        return Report(tuple(v), None)
    v += _placement_violations(plan, problem)
    if kind == "pipeline":
        objective = pipeline_loads(problem, plan.placement).objective
    elif kind == "call-latency":
        try:
            objective = call_latency(problem, plan.placement).makespan
        except ValidationError as exc:
            v.append(str(exc))
            objective = None
    else:
        objective = _check_schedule(plan, problem, v)
    if objective is not None:
        if abs(objective - plan.objective) > REL_TOL * max(abs(objective), 1.0) + ABS_TOL:
            v.append(f"plan claims objective {plan.objective:.9g} but it is {objective:.9g}")
        if not _close_or_below(plan.bound, objective):
            v.append(f"plan's bound {plan.bound:.9g} exceeds its objective {objective:.9g}")
    if plan.status not in ("optimal", "feasible", "timeout"):
        v.append(f"plan has status {plan.status!r}")
    return Report(tuple(v), objective)


def _coverage_violations(plan: Plan, problem: Problem) -> list[str]:
    """Tasks without a device, and tasks the graph does not have."""
    graph, parts = problem.graph, plan.parts
    return ([f"task {t.id!r} has no device" for t in graph.tasks if t.id not in parts]
            + [f"plan names unknown task {task!r}" for task in parts if task not in graph.by_id])


def _part_violations(plan: Plan, problem: Problem) -> list[str]:
    """Parts on unknown or disallowed devices, parts of fewer than one sample, splits outside the batch
    objective or of a whole_batch task, and tasks whose parts do not cover the batch."""
    graph, platform, parts, v = problem.graph, problem.platform, plan.parts, []
    for t in graph.tasks:
        p = parts[t.id]
        for dev, b in p:
            if dev not in platform.by_name:
                v.append(f"task {t.id!r} is on unknown device {dev!r}")
            elif not t.can_run_on(platform.by_name[dev].type):
                v.append(f"task {t.id!r} may not run on {dev!r} (type {platform.by_name[dev].type})")
            if b < 1:
                v.append(f"task {t.id!r} has a part of {b} samples")
        if problem.objective.kind != "batch" and len(p) != 1:
            v.append(f"task {t.id!r} is split into {len(p)} parts, allowed only for the batch objective")
        elif t.whole_batch and len(p) != 1:
            v.append(f"task {t.id!r} must run on the whole batch at once (whole_batch: its result for a sample "
                     f"depends on other samples), not in {len(p)} parts")
        if sum(b for _, b in p) != problem.batch_size:
            v.append(f"task {t.id!r} covers {sum(b for _, b in p)} samples, not {problem.batch_size}")
    return v


def _placement_violations(plan: Plan, problem: Problem) -> list[str]:
    return _violations(problem, {t: {d for d, _ in p} for t, p in plan.parts.items()}, plan.placement)


def placement_violations(problem: Problem, placement: Mapping[str, str]) -> list[str]:
    """What a placement of every task on one device breaks: co-location groups spread over devices, devices
    holding more than their memory, and (contiguous pipeline) devices whose tasks are not contiguous."""
    return _violations(problem, {t: {d} for t, d in placement.items()}, placement)


def _violations(problem: Problem, devices_of: Mapping[str, set[str]], placement: Mapping[str, str]) -> list[str]:
    """:func:`placement_violations` where a task's parts may run on several devices (``devices_of``);
    ``placement``: each task's main device, for contiguity."""
    graph, platform, v = problem.graph, problem.platform, []
    for name, members in problem.colocation_groups.items():
        if len({frozenset(devices_of[m]) for m in members}) > 1:
            v.append(f"co-location group {name!r} is spread over several devices")
    used: dict[str, float] = {d.name: 0.0 for d in platform.devices}
    for t in graph.tasks:
        for d in devices_of[t.id]:
            used[d] += t.memory_bytes
    for d in platform.devices:
        if not _close_or_below(used[d.name], d.memory_bytes):
            v.append(f"device {d.name!r} holds {used[d.name]:.6g} bytes, more than its {d.memory_bytes:.6g}")
    if problem.objective.kind == "pipeline" and problem.objective.contiguous:
        v.extend(contiguity_violations(problem, dict(placement)))
    return v


def check(plan: Plan, problem: Problem) -> None:
    """Raise ValidationError listing what the plan breaks."""
    report = validate(plan, problem)
    if not report.ok:
        more = f" (and {len(report.violations) - 3} more)" if len(report.violations) > 3 else ""
        raise ValidationError(f"plan by {plan.solver} is invalid: {'; '.join(report.violations[:3])}{more}")


def _check_schedule(plan: Plan, problem: Problem, v: list[str]) -> float | None:
    """Check start times (precedence + transfers, one job at a time per device); return the makespan. On a
    'receiver' platform a job's device spends the transfers of the rows it does not hold yet before the job
    computes (the first job on it by start time to read them), and the job waits only for its producers."""
    graph, platform = problem.graph, problem.platform
    if any(a.start is None for a in plan.assignments):
        v.append("a latency/batch plan needs a start time for every task part")
        return None
    jobs: dict[str, list[list]] = {}  # task -> [dev, lo, hi, start, finish]
    listed: list[tuple[float, int, str, list]] = []  # (start, position in the plan, task, job)
    for i, a in enumerate(plan.assignments):
        b = a.batch or plan.batch_size
        lo = jobs[a.task][-1][2] if a.task in jobs else 0  # a task's parts take the batch's rows in turn
        if a.start < -ABS_TOL:
            v.append(f"task {a.task!r} starts before time 0")
        job = [a.device, lo, lo + b, a.start, a.start + problem.time(a.task, a.device, b)]
        jobs.setdefault(a.task, []).append(job)
        listed.append((a.start, i, a.task, job))
    receiving = platform.transfers == "receiver"
    if receiving:
        held: set = set()
        for _, _, t, job in sorted(listed, key=lambda x: x[:2]):
            for u in graph.predecessors[t]:
                for _, ujob, overlap in _sharing_rows([job], jobs[u]):
                    rows = (u, ujob[1], job[0], max(job[1], ujob[1]), overlap)
                    hop = platform.transfer_time(graph.by_id[u], ujob[0], job[0], overlap / graph.batch_size)
                    if hop > 0 and rows not in held:
                        held.add(rows)
                        job[4] += hop
    for t in graph.tasks:
        for u in graph.predecessors[t.id]:
            for (dev, _, _, start, _), (udev, _, _, _, ufinish), overlap in _sharing_rows(jobs[t.id], jobs[u]):
                arrival = ufinish if receiving else \
                    ufinish + platform.transfer_time(graph.by_id[u], udev, dev, overlap / graph.batch_size)
                if not _close_or_below(arrival, start):
                    v.append(f"task {t.id!r} on {dev} starts at {start:.9g} before its input from {u!r} "
                             f"{'is made' if receiving else 'arrives'} at {arrival:.9g}")
    per_device: dict[str, list[tuple[float, float, str]]] = {}
    for t, js in jobs.items():
        for dev, _, _, start, finish in js:
            per_device.setdefault(dev, []).append((start, finish, t))
    for dev, js in per_device.items():
        js.sort()
        for (s1, f1, t1), (s2, f2, t2) in zip(js, js[1:]):
            if not _close_or_below(f1, s2):
                v.append(f"tasks {t1!r} and {t2!r} overlap on {dev}")
    return max(f for js in jobs.values() for *_, f in js)


def _sharing_rows(parts: list[tuple], inputs: list[tuple]):
    """(part, input part, rows shared) for every pair that shares rows of the batch: both lists hold
    consecutive row ranges ``(.., lo, hi, ..)`` from 0, so one pass over each finds them all (a batch of
    4,096 streamed one sample at a time is 4,096 parts a task, not 16 million pairs)."""
    i = k = 0
    while i < len(parts) and k < len(inputs):
        lo, hi = parts[i][1], parts[i][2]
        ulo, uhi = inputs[k][1], inputs[k][2]
        overlap = min(hi, uhi) - max(lo, ulo)
        if overlap > 0:
            yield parts[i], inputs[k], overlap
        if hi <= uhi:
            i += 1
        else:
            k += 1


def contiguity_violations(problem: Problem, placement: dict[str, str]) -> list[str]:
    """A contiguous split runs its stages in one order, every tensor flowing forward: the devices' sets of
    units, contracted, leave the stage order (:class:`~diviml.problem.StageOrder`) acyclic. So each device's
    set is convex (no path leaves it and comes back), and no two devices pass tensors both ways, directly or
    through others (two convex sets can: x1 -> x2 and y1 -> y2 with x1, y2 on one device and x2, y1 on the
    other; neither stage can run first, and the DP over ideals never makes such a split). A unit's device is
    its first task's (co-location is checked on its own)."""
    order = problem.stage_order
    device = {u: placement[ts[0]] for u, ts in order.units.items()}
    successors: dict[str, list[str]] = {u: [] for u in device}
    for a, b in order.edges:
        successors[a].append(b)
    out = []
    for dev in sorted(set(device.values())):
        members = {u for u, d in device.items() if d == dev}
        frontier = [s for u in members for s in successors[u] if s not in members]
        seen = set(frontier)
        while frontier:
            x = frontier.pop()
            for s in successors[x]:
                if s in members:
                    out.append(f"device {dev!r} holds a non-contiguous set: a path leaves it at {_name(x)!r} "
                               f"and re-enters at {_name(s)!r}")
                    frontier = []
                    break
                if s not in seen:
                    seen.add(s)
                    frontier.append(s)
    return out or _stage_cycle(order.edges, device)


def _stage_cycle(edges, device: dict[str, str]) -> list[str]:
    """The devices whose stages pass tensors round in a cycle, as one violation (none where the contracted
    order is acyclic)."""
    between = nx.DiGraph()
    tensor: dict[tuple[str, str], tuple[str, str]] = {}  # a tensor on each edge between devices, to name it
    for a, b in sorted(edges):
        if device[a] != device[b]:
            between.add_edge(device[a], device[b])
            tensor.setdefault((device[a], device[b]), (a, b))
    try:
        cycle = nx.find_cycle(between)
    except nx.NetworkXNoCycle:
        return []
    hops = ", ".join(f"{_name(tensor[e][0])!r} -> {_name(tensor[e][1])!r}" for e in cycle)
    devices = " -> ".join(repr(d) for d in [cycle[0][0], *(e[1] for e in cycle)])
    return [f"the stages on devices {devices} pass tensors round a cycle ({hops}): no order of the stages runs "
            "every tensor forward"]


def _name(unit: str) -> str:
    """A unit as the user wrote it: the task's id or 'group NAME'."""
    return unit[2:] if unit.startswith("t:") else f"group {unit[2:]}"
