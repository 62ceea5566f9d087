"""Baseline: the memory segments bound's mix of placements made into a plan (latency where memory binds).

The bound (:mod:`diviml.bounds._segments`) ends with a few whole placements, each a kind of device per task,
whose weighted memory fits every kind's. A plan cannot run a weighted mix, but a model of many segments can
run each placement on its share of them: the segments are spliced in order, each placement taking a run of
them that holds its weight's share of the memory. Tasks then move off any kind still over its memory (the
least time lost per byte first, the transfers a move makes counted: a layer norm moved to another server for
its speed sent two tensors over the network), each kind keeping a margin for packing whole tasks into its devices, and
HEFT places every task on a device of its kind (earliest finish, within memory), so parallel branches spread
over a kind's devices and chains stay on one. A tighter margin is tried first, a looser one where HEFT cannot
pack the devices. What memory the devices then have left takes the tasks that run faster there, most time
saved per byte first, and the simulator keeps the better of the two plans.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from ...bounds import memory_segments_relaxation, packable_memory
from ...errors import InfeasibleError
from ...plan import Plan
from ...problem import Problem
from ..engines.jobs import JobGraph
from ..engines.plans import Stopwatch, make_plan, plan_from_jobs
from .heft import heft_schedule

__all__ = ["priced_segments_plan"]

NAME = "priced segments"
MARGINS = (1.0, 0.995, 0.99, 0.98, 0.95, 0.9)  # the share of what whole tasks can fill of a kind's memory it may take
LEAST_WEIGHT = 1e-3  # a placement of less weight in the mix is left out (it would take a task or two)


def priced_segments_plan(problem: Problem, watch: Stopwatch) -> Plan | None:
    """The plan described above, or None where the bound left no mix (it did not apply or ran out of time)
    or no margin lets HEFT pack the devices. The bound's last mixes are tried in turn, the last first, while
    the time lasts (GPT-3's prefill over six-servers: 24.98 s from the mix before the last, 25.44 s from the
    last), and the best plan is kept."""
    relaxation = memory_segments_relaxation(problem)
    if relaxation is None:
        return None
    best: Plan | None = None
    fillable = _fillable(problem, relaxation.kinds, watch)  # once for all mixes: it depends on the kinds alone
    for mix in relaxation.mixes:
        if watch.expired and best is not None:
            break
        plan = _plan_from(problem, mix, relaxation.kinds, fillable, watch) if mix else None
        best = plan if best is None or (plan is not None and plan.objective < best.objective) else best
    return best


def _plan_from(problem: Problem, mix: Sequence[tuple[float, dict[str, str]]], devices_of: Mapping[str, Sequence[str]],
               fillable: Mapping[str, float], watch: Stopwatch) -> Plan | None:
    """The plan of one mix (module doc): the tightest margin of each kind's ``fillable`` bytes HEFT can pack, then
    refilled where that is better."""
    spliced = _splice(problem, mix)
    whole = JobGraph.whole(problem)
    allowed = problem.allowed_devices
    for margin in MARGINS:
        if watch.expired:
            break
        kind_of = _fit(problem, spliced, devices_of, {k: margin * c for k, c in fillable.items()})
        jobs = dataclasses.replace(whole, only={(t, 0): tuple(d for d in devices_of[k] if d in allowed[t])
                                                for t, k in kind_of.items()})
        try:
            placement, start, _ = heft_schedule(jobs)
        except InfeasibleError:
            continue
        note = (f"the memory segments bound's {len(mix)} placements spliced over the model, "
                f"{margin:.1%} of each kind's memory filled at most, devices by HEFT")
        plan = plan_from_jobs(jobs, placement, start, solver=NAME, status="feasible", watch=watch, notes=[note])
        refilled, moved = _refilled(problem, {a.task: a.device for a in plan.assignments})
        if moved and not watch.expired:
            other = make_plan(problem, placement=refilled, solver=NAME, status="feasible", watch=watch, notes=[
                f"{note}; then {moved} tasks moved to devices with memory left, where they run faster"])
            plan = other if other.objective < plan.objective else plan
        return plan
    return None


def _refilled(problem: Problem, placement: Mapping[str, str]) -> tuple[dict[str, str], int]:
    """``placement`` with the memory its devices have left filled: tasks of nonzero memory move, most time
    saved per byte first, to the device with room where they run fastest, while that saves time (the margin
    that let HEFT pack the devices leaves room; GPT-3's prefill over h100-nvlink-8 kept 4 GB of weights on the
    CPU that a GPU could hold). Transfers are left to the simulator, which times the result."""
    graph, platform = problem.graph, problem.platform
    room = {d.name: d.memory_bytes for d in platform.devices}
    for t, d in placement.items():
        room[d] -= graph.by_id[t].memory_bytes
    out, moved = dict(placement), 0

    def saving(t: str) -> float:  # time saved per byte on the fastest device that could hold t now
        times = [problem.time(t, d) for d in problem.allowed_devices[t] if d != out[t]]
        return (problem.time(t, out[t]) - min(times, default=problem.time(t, out[t]))) / graph.by_id[t].memory_bytes

    movable = (t for t in out if graph.by_id[t].memory_bytes > 0 and graph.by_id[t].colocation is None)
    for t in sorted(movable, key=saving, reverse=True):  # a co-located task stays with its group
        need = graph.by_id[t].memory_bytes
        options = [d for d in problem.allowed_devices[t] if d != out[t] and room[d] >= need
                   and problem.time(t, d) < problem.time(t, out[t])]
        if options:
            best = min(options, key=lambda d: problem.time(t, d))
            room[out[t]] += need
            room[best] -= need
            out[t] = best
            moved += 1
    return out, moved


def _splice(problem: Problem, mix: Sequence[tuple[float, dict[str, str]]]) -> dict[str, str]:
    """Task -> kind: the placements in turn, each over the run of tasks (in topological order) that holds
    its weight's share of the memory."""
    graph = problem.graph
    mix = [(w, kinds) for w, kinds in mix if w >= LEAST_WEIGHT] or [max(mix, key=lambda wk: wk[0])]
    scale = sum(w for w, _ in mix)
    mix = [(w / scale, kinds) for w, kinds in mix]
    tasks = [t for t in graph.topological_order if t in mix[0][1]]
    total = sum(graph.by_id[t].memory_bytes for t in tasks) or 1.0
    edges, reached = [], 0.0
    for weight, _ in mix:
        reached += weight
        edges.append(reached * total)
    out, held, k = {}, 0.0, 0
    for t in tasks:
        middle = held + graph.by_id[t].memory_bytes / 2
        while k < len(mix) - 1 and middle > edges[k]:
            k += 1
        out[t] = mix[k][1][t]
        held += graph.by_id[t].memory_bytes
    return out


def _fillable(problem: Problem, devices_of: Mapping[str, Sequence[str]], watch: Stopwatch) -> dict[str, float]:
    """Each kind's memory as whole tasks can fill it (:func:`diviml.bounds.packable_memory`, kept from the bound
    that made the mixes), at most its devices' summed memory: filling a kind's summed bytes left HEFT unable to
    pack its devices (GPT-3's prefill over six-servers: 8 A100s hold 319.56 GB of its tasks, not 320), so a
    margin of 99.5% was the tightest it took, and a plan 24.59 s where filling what whole tasks can gives 24.43 s."""
    by_name = problem.platform.by_name
    return {k: min(packable_memory(problem, names, max(watch.left, 0.0)), sum(by_name[d].memory_bytes for d in names))
            for k, names in devices_of.items()}


def _fit(problem: Problem, kind_of: dict[str, str], devices_of: Mapping[str, Sequence[str]],
         capacity: Mapping[str, float]) -> dict[str, str]:
    """``kind_of`` with tasks moved off kinds (``devices_of``: kind -> device names) holding more than their
    ``capacity`` (bytes): each move the least time lost per byte, to a kind with room that the task may run on;
    the time lost counts the task's inputs moved to the other kind and its output moved back."""
    graph, platform = problem.graph, problem.platform
    kind_of_device = {d: k for k, names in devices_of.items() for d in names}
    time_on: dict[str, dict[str, float]] = {}
    for t in kind_of:
        for name in problem.allowed_devices[t]:
            time_on.setdefault(t, {})[kind_of_device[name]] = problem.time(t, name)
    held = {k: 0.0 for k in capacity}
    for t, k in kind_of.items():
        held[k] += graph.by_id[t].memory_bytes
    out = dict(kind_of)

    least: dict[tuple, float] = {}

    def move(u: str, a: str, b: str) -> float:  # the least time u's output takes from kind a to kind b
        task = graph.by_id[u]
        key = (task.output_bytes, task.transfer_time, a, b)
        if key not in least:
            least[key] = min(platform.transfer_time(task, x, y) for x in devices_of[a] for y in devices_of[b])
        return least[key]

    def target(t: str, k: str) -> tuple[float, str]:  # time lost per byte moving t off k, and where to
        need = graph.by_id[t].memory_bytes
        room = [(time_on[t][j] - time_on[t][k] + sum(move(u, k, j) for u in graph.predecessors[t]) + move(t, j, k), j)
                for j in time_on[t] if j != k and held[j] + need <= capacity[j]]
        lost, j = min(room, default=(float("inf"), k))
        return lost / need, j

    for k in sorted(capacity, key=lambda k: held[k] - capacity[k], reverse=True):
        if held[k] <= capacity[k]:
            continue
        movable = sorted((t for t in out if out[t] == k and graph.by_id[t].memory_bytes > 0),
                         key=lambda t: target(t, k)[0])
        for t in movable:  # cheapest first, each sent where there is room when its turn comes
            if held[k] <= capacity[k]:
                break
            j = target(t, k)[1]
            if j != k:
                out[t] = j
                held[k] -= graph.by_id[t].memory_bytes
                held[j] += graph.by_id[t].memory_bytes
    return out
