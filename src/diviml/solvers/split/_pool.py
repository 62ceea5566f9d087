"""Module solves in worker processes, keyed by shape so that repeated modules share their answers."""

from __future__ import annotations

import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from ...bounds import share_lower_bound
from ...plan import Plan
from ...problem import Problem
from ..engines.highs import process_context
from ..engines.plans import Stopwatch
from ..search import baseline_plan
from ._messages import Answer, Request
from ._worker import baselines_and_bound, init_worker, solve_module


class Background:
    """The baseline plan and the problem's lower bound, computed in a process of their own while the join
    runs (with more than one worker). On gpt2-small they take 0.8 s of a 2 s solve (the LP bound 0.5 s),
    and the join leaves part of the cores idle: the main process between steps, steps with fewer solves
    than workers."""

    def __init__(self, problem: Problem, watch: Stopwatch, workers: int):
        self.problem, self.executor = problem, None
        if workers > 1:
            self.executor = ProcessPoolExecutor(1, mp_context=process_context(), initializer=init_worker,
                                                initargs=(problem,))
            self.future = self.executor.submit(baselines_and_bound, watch.left, time.time())
        else:
            self.plan = baseline_plan(problem, watch)

    def result(self) -> Plan | None:
        """The baseline plan, once it is there; the problem's lower bound is then known here too."""
        if self.executor is not None:
            self.plan, bound, source = self.future.result()
            share_lower_bound(self.problem, bound, source)
            self.close()
        return self.plan

    def close(self) -> None:
        if self.executor is not None:
            stop(self.executor)
            self.executor = None


def stop(executor) -> None:
    """End a process pool now: queued work cancelled, and workers still solving a module stopped rather than
    waited for (at GPT-3's size on 26 devices a module solve in flight held the plan 3 s past its deadline)."""
    workers = list(getattr(executor, "_processes", {}).values())  # no public way before Python 3.14
    executor.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        if process.is_alive():  # SIGKILL: a forked worker shares the CLI's signal pipe, so SIGTERM would end both
            process.kill()
    for process in workers:
        process.join(timeout=1.0)


class Pool:
    """Module solves in worker processes (forked where the platform allows), or in this one.

    Requests are keyed by their *shape* (:func:`shape_of`): tasks named by position, with their costs and
    edges. Modules that repeat (a transformer's layers, a ResNet stage's blocks) then share their solves:
    within one batch of requests an identical request is solved once, and a proven answer is reused
    whenever it comes up again. Requests are also keyed by their *structure* (:func:`structure_of`): each
    solve is guided by the latest schedule found for its structure."""

    def __init__(self, problem: Problem, workers: int):
        self.previous = init_worker(problem)  # given back on close: a baseline's exact solve opens a pool inside
        self.problem = problem
        self.workers = max(workers, 1)
        self.executor = None
        if workers > 1:
            self.executor = ProcessPoolExecutor(workers, mp_context=process_context(), initializer=init_worker,
                                                initargs=(problem,))
        self.shapes: dict = {}  # (tasks, sizes) -> shape
        self.proven: dict = {}  # request key -> the module's optimum (tasks by position), reused by later requests
        self.floor: dict = {}  # request key -> a makespan cutoff proven out of reach (no shorter schedule exists)
        self.reused = 0  # requests answered without a solve (proven earlier, or the same in one batch)
        self.guides: dict = {}  # structure key -> the latest schedule found for it (by position)

    def map(self, requests: list[Request]) -> list[Answer]:
        """The answers to ``requests``. Requests of one key are solved once, with the loosest cutoff (the
        join compares each answer with what its own request's state reached, as it would any other). The
        module's optimum (found without a cutoff, or under a makespan cutoff) answers later requests of its
        key; so does a makespan cutoff proven out of reach, for tighter ones."""
        keys = [self._key(r) for r in requests]
        todo: dict = {}
        for r, k in zip(requests, keys):
            if self._known(r, k) is not None:
                continue
            if k in todo and todo[k].cutoff is not None:
                todo[k] = replace(todo[k], cutoff=None if r.cutoff is None else max(r.cutoff, todo[k].cutoff))
            todo.setdefault(k, r)
        structures = {k: structure_of(k) for k in todo}
        todo = {k: replace(r, guide=self.guides.get(structures[k])) for k, r in todo.items()}
        if self.executor is None or len(todo) <= 1:
            answers = map(solve_module, todo.values())
        else:
            answers = self.executor.map(solve_module, todo.values())
        fresh = {k: by_position(a, r.tasks) for (k, r), a in zip(todo.items(), answers)}
        for k, a in fresh.items():
            request = todo[k]
            if a.device_of is not None:
                self.guides[structures[k]] = (a.device_of, a.order_key)
            if a.status == "optimal":
                self.proven[k] = a
            elif a.status == "cutoff":
                self.floor[k] = max(request.cutoff, self.floor.get(k, -math.inf))
        self.reused += len(requests) - len(fresh)
        return [by_task(fresh[k] if k in fresh else self._known(r, k), r.tasks) for r, k in zip(requests, keys)]

    def _known(self, request: Request, key: tuple) -> Answer | None:
        if key in self.proven:
            return self.proven[key]
        if request.cutoff is not None and request.cutoff <= self.floor.get(key, -math.inf):
            return Answer(None, None, "cutoff", self.floor[key])
        return None

    def _key(self, request: Request) -> tuple:
        """What a module solve's answer depends on besides its time limit and seed, tasks by position."""
        shape = self.shapes.get((request.tasks, request.sizes))
        if shape is None:
            shape = self.shapes[request.tasks, request.sizes] = shape_of(self.problem, request.tasks, request.sizes)
        index = {t: i for i, t in enumerate(request.tasks)}
        capacity = tuple(sorted(request.capacity.items())) if request.capacity is not None else None
        # releases are differences of absolute times: rounded, so that repeated modules' keys meet
        release = tuple(sorted(((index[t], l), d, float(f"{v:.10g}")) for ((t, l), d), v in request.release.items()))
        only = tuple(sorted(((index[t], l), devices) for (t, l), devices in request.only.items()))
        return shape, request.sizes, release, only, capacity

    def close(self) -> None:
        init_worker(self.previous)
        if self.executor is not None:
            stop(self.executor)


def shape_of(problem: Problem, tasks: tuple[str, ...], sizes: tuple[int, ...]) -> tuple:
    """A module's tasks as its solve sees them, named by position: time on each allowed device at each
    sub-batch size, what sets their transfers and resident memory, co-location group, producers inside."""
    graph = problem.graph
    index = {t: i for i, t in enumerate(tasks)}
    groups = problem.colocation_groups
    rows = []
    for t in tasks:
        task = graph.by_id[t]
        rows.append((tuple((d, tuple(problem.time(t, d, b) for b in sizes)) for d in problem.allowed_devices[t]),
                     task.output_bytes, task.transfer_time, task.memory_bytes,
                     task.colocation if task.colocation in groups else None,
                     tuple(index[u] for u in graph.predecessors[t] if u in index)))
    return tuple(rows)


def structure_of(key: tuple) -> tuple:
    """From a request's key (:meth:`Pool._key`), what a schedule of a module needs to fit another one's:
    the same tasks by position (devices allowed, co-location, producers inside), sub-batches and pins;
    costs, releases and memory left may differ."""
    shape, sizes, _, only, _ = key
    return tuple((tuple(d for d, _ in row[0]), row[4], row[5]) for row in shape), sizes, only


def by_position(answer: Answer, tasks: tuple[str, ...]) -> Answer:
    """The answer with its jobs named (position of the task in the module, sub-batch)."""
    if answer.device_of is None:
        return answer
    index = {t: i for i, t in enumerate(tasks)}
    return replace(answer, device_of={(index[t], l): d for (t, l), d in answer.device_of.items()},
                   order_key={(index[t], l): v for (t, l), v in answer.order_key.items()})


def by_task(answer: Answer, tasks: tuple[str, ...]) -> Answer:
    """The inverse of :func:`by_position`, for a module with these tasks."""
    if answer.device_of is None:
        return answer
    return replace(answer, device_of={(tasks[i], l): d for (i, l), d in answer.device_of.items()},
                   order_key={(tasks[i], l): v for (i, l), v in answer.order_key.items()})
