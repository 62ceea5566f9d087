"""Baseline: HEFT (Topcuoglu, Hariri and Wu, 2002), memory-aware and co-location-aware.

Jobs in decreasing upward rank (mean time over allowed devices plus mean transfer over distinct device
pairs), each to the device of earliest finish time, inserted into the earliest idle gap that fits; where the
platform's receiver spends transfers (``transfers: receiver``), a job's time on a device includes those of its
inputs from elsewhere, which then do not delay it.
For the ``batch`` objective every task runs the whole batch on one device (no data parallelism); the
exact solver also runs HEFT on a batch split into sub-batches (see :mod:`.jobs`) for its hint.
"""

from __future__ import annotations

import bisect
import math

from ...errors import InfeasibleError
from ...problem import Problem
from ..engines.jobs import JobGraph, JobKey, earliest_gap
from ..engines.plans import Stopwatch, plan_from_jobs

NAME = "heft"


def upward_ranks(jobs: JobGraph) -> dict[JobKey, float]:
    """Each job's mean time plus the longest path of mean transfers and mean times below it.

    A transfer's time depends on its task only through the output's size and a given transfer time, so the
    mean over the device pairs is computed once per such key (GPT-3's layers have a handful of output sizes),
    and once per route rather than per pair (:meth:`Platform.mean_transfer_time`: a random DAG of 1,000 tasks
    in 4 sub-batches over six-servers' 650 pairs took 3 s a HEFT run, most of a 3 s limit)."""
    platform, graph = jobs.problem.platform, jobs.problem.graph
    mean_comm_of: dict[tuple, float] = {}
    rank: dict[JobKey, float] = {}
    for j in reversed(jobs.jobs):  # fsum / n is statistics.fmean's value, without its per-item overhead
        times = [jobs.duration(j, d) for d in jobs.devices(j)]
        mean_time = math.fsum(times) / len(times)
        task = graph.by_id[j[0]]
        key = (task.output_bytes, task.transfer_time, jobs.sizes[j[1]])
        mean_comm = mean_comm_of.get(key)
        if mean_comm is None:
            mean_comm = mean_comm_of[key] = platform.mean_transfer_time(task, jobs.sizes[j[1]] / graph.batch_size)
        rank[j] = mean_time + max((mean_comm + rank[s] for s in jobs.succs(j)), default=0.0)
    return rank


def heft_schedule(jobs: JobGraph) -> tuple[dict[JobKey, str], dict[JobKey, float], float]:
    """(device, start time, makespan) of HEFT over the jobs."""
    problem = jobs.problem
    graph, platform = problem.graph, problem.platform
    rank = upward_ranks(jobs)
    position = {j: i for i, j in enumerate(jobs.jobs)}
    busy: dict[str, list[tuple[float, float]]] = {d.name: [] for d in platform.devices}  # sorted (start, end)
    memory_left = {d.name: d.memory_bytes if jobs.capacity is None else jobs.capacity[d.name]
                   for d in platform.devices}
    resident: set[tuple[str, str]] = set()  # (task or group, device) whose memory is already counted
    group_device: dict[tuple[str, int], str] = {}
    groups = problem.colocation_groups
    placement: dict[JobKey, str] = {}
    start: dict[JobKey, float] = {}
    finish: dict[JobKey, float] = {}
    receiving = platform.transfers == "receiver"
    for j in sorted(jobs.jobs, key=lambda j: (-rank[j], position[j])):
        task = graph.by_id[j[0]]
        group = task.colocation if task.colocation in groups else None
        members = tuple(m for m in groups[group] if jobs.has(m)) if group else (task.id,)
        owner = f"group:{group}" if group else task.id
        need = sum(graph.by_id[m].memory_bytes for m in members)
        if group and (group, j[1]) in group_device:
            options = [group_device[(group, j[1])]]
        else:
            options = [d for d in jobs.devices(j)
                       if ((owner, d) in resident or memory_left[d] >= need)
                       and all(d in jobs.devices((m, j[1])) for m in members)]  # a member pinned: all are
        if not options:
            raise InfeasibleError(f"heft could not place task {task.id!r} within the devices' memory left by the "
                                  "tasks before it: try exact or split (an exact search packs memory), greedy, "
                                  "or raise the memory limit")
        best = None
        for d in options:
            hops = [jobs.transfer(u, placement[u], d) for u in jobs.preds(j)]
            if receiving:  # the device spends its inputs' transfers before the job: a longer job, no delay
                ready = max([jobs.released(j, d)] + [finish[u] for u in jobs.preds(j)])
                duration = jobs.duration(j, d) + math.fsum(hops)
            else:
                ready = max([jobs.released(j, d)] + [finish[u] + hop for u, hop in zip(jobs.preds(j), hops)])
                duration = jobs.duration(j, d)
            est = earliest_gap(busy[d], ready, duration)
            if best is None or est + duration < best[0] - 1e-12:
                best = (est + duration, est, d)
        eft, est, d = best
        placement[j], start[j], finish[j] = d, est, eft
        bisect.insort(busy[d], (est, eft))
        if group:
            group_device[(group, j[1])] = d
        if (owner, d) not in resident:
            resident.add((owner, d))
            memory_left[d] -= need
    return placement, start, max(finish.values(), default=0.0)


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0, progress=None):
    watch = Stopwatch(time_limit)
    jobs = JobGraph.whole(problem)
    placement, start, makespan = heft_schedule(jobs)
    return plan_from_jobs(jobs, placement, start, solver=NAME, status="feasible", watch=watch,
                          stats={"heft_makespan": makespan})
