"""Pipelines: the slowest device of a split relieved one co-location class at a time (a local search).

On a large model the IP stops at its limit with its warm start, a chain of runs (:mod:`.chain`) whose ends
fall where a device's memory or the bisection's target stops them: on GPT-3 over six servers the H100s are
full of weights, some V100s hold 1.5 GB less than they could and the last device of the chain has time to
spare, while the A100s carry the largest load. The polish repeatedly takes the device of the largest load
and moves one class off it (a task, a view or a co-location group) to the device, with the memory for it,
where the largest of the loads the move changes is least, as long as that stays below the load it relieves.
Where no class of its own helps, in turn:

- a *relay*: a class of no compute on another server whose output the slowest device reads (a view) moves,
  usually to the host CPU of the slowest device's server, which then pays the network instead of it;
- an *island*: up to :data:`BLOCK` classes of little memory joined by their tensors, such as a layer's
  attention between the projections whose weights stay, which moved alone would each pay hops both ways;
- a run of up to :data:`BLOCK` consecutive classes at either end of a run it holds, which cuts no new tensor
  inside it.

Views and relays save only hops; taken as soon as they help, they steer the search elsewhere. So the polish
first makes the moves that carry compute until none helps, then all of them: from the chain, GPT-3's pipeline
over six-servers 1.7014 s where all moves at once gave 1.7068 s, its decoding step 0.79908 s where 0.79922 s,
its BF16 prefill 0.17039 s either way.

Every move lowers the sorted vector of loads, so the search ends; it stops earlier at its deadline. Loads are
the simulator's (:func:`diviml.simulate.pipeline_loads`: compute, each tensor's hop out of its device once and
into each other device that reads it, both ends of a peer link, the network on the receiver) and are kept up
to date per move from the tensors the moved classes produce and read.

GPT-3's pipeline over six-servers: 1.736 -> 1.710 s (19 moves, 1 s; with islands 1.7089 s, where 1.7103 s
without, and its BF16 prefill 0.16602 -> 0.16596 s; with relays, and views off the slowest device, which take
the network off it the same way, 1.7014 s from the same warm start, and its decoding step 0.6994 -> 0.6921 s);
over a100-ib-2x8 20.13 -> 18.58 s, 0.05% above the work MILP's bound (117 moves). Non-contiguous splits of
inference and PipeDream-style training only (a move may break a contiguous stage, and GPipe sums two maxima
that one move trades against each other).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from ...problem import Problem
from ..engines.plans import Stopwatch

__all__ = ["polish"]

BLOCK = 64  # classes moved together at most (a GPT-3 layer is 55 tasks)
LIGHT = 1e-3  # of a device's memory: a class holding no more is light (see :meth:`_State._islands`)
SLACK = 1e-9  # relative: a move must lower the slowest device's load by more than this share


def polish(problem: Problem, placement: Mapping[str, str], watch: Stopwatch) -> tuple[dict[str, str], int] | None:
    """The placement after the moves described above and how many were made, or None where the objective
    is not one the polish handles (contiguous, GPipe, not a pipeline)."""
    objective = problem.objective
    if objective.kind != "pipeline" or objective.contiguous or (problem.is_training and objective.training == "gpipe"):
        return None
    state = _State(problem, placement)
    moves = 0
    for hops_alone in (False, True):  # moves that carry compute first: see the module's docstring
        while not watch.expired and state.relieve(watch, hops_alone):
            moves += 1
    return state.placement(), moves


class _State:
    """A split's device per class, its devices' loads and memory, and per producing task the devices that
    read its output and the load each device pays for it."""

    def __init__(self, problem: Problem, placement: Mapping[str, str]):
        self.problem = problem
        graph, platform = problem.graph, problem.platform
        self.members = [list(ts) for ts in problem.stage_order.units.values()]  # co-location groups, tasks
        self.class_of = {t: c for c, m in enumerate(self.members) for t in m}
        self.device = [placement[m[0]] for m in self.members]
        self.load = {d.name: 0.0 for d in platform.devices}
        self.used = {d.name: 0.0 for d in platform.devices}
        self.capacity = {d.name: d.memory_bytes for d in platform.devices}
        self.memory = [sum(graph.by_id[t].memory_bytes for t in m) for m in self.members]
        self._time: dict[tuple[int, str], float | None] = {}
        self._hops: dict[tuple[str, str, bool], float] = {}
        self.server = {d.name: d.server for d in platform.devices}
        for c, d in enumerate(self.device):
            self.load[d] += self.time(c, d) or 0.0
            self.used[d] += self.memory[c]
        self.readers: dict[str, Counter] = {}  # producer -> Counter(device of each consumer)
        self.charge: dict[str, dict[str, float]] = {}
        for task in graph.tasks:
            if graph.successors[task.id]:
                self.readers[task.id] = Counter(placement[v] for v in graph.successors[task.id])
                self.charge[task.id] = self._charge(task.id, placement[task.id], self.readers[task.id])
                for d, x in self.charge[task.id].items():
                    self.load[d] += x
        first: dict[int, None] = {}
        for t in graph.topological_order:
            first.setdefault(self.class_of[t], None)
        self.order = list(first)  # the classes in a topological order of their first tasks
        self.touched = [sorted({t for t in m if t in self.readers}
                               | {u for t in m for u in graph.predecessors[t] if self.class_of[u] != c})
                        for c, m in enumerate(self.members)]

    def time(self, c: int, device: str) -> float | None:
        """Class ``c``'s compute on ``device`` (None: some task of it may not run there)."""
        key = (c, device)
        if key not in self._time:
            allowed = self.problem.allowed_devices
            ok = all(device in allowed[t] for t in self.members[c])
            self._time[key] = sum(self.problem.time(t, device) for t in self.members[c]) if ok else None
        return self._time[key]

    def _charge(self, task: str, home: str, readers: Counter) -> dict[str, float]:
        """The load each device pays for ``task``'s output, made on ``home`` and read on ``readers``' devices
        (the rule of :func:`diviml.simulate.pipeline_loads`)."""
        out: dict[str, float] = {}
        staged = False
        for other in sorted(d for d, n in readers.items() if n > 0 and d != home):
            peer = self._peer(task, home, other)
            if peer is not None:
                out[home] = out.get(home, 0.0) + peer
                out[other] = out.get(other, 0.0) + peer
                continue
            staged = True
            out[other] = out.get(other, 0.0) + self._hop(task, other, home)
        if staged:
            out[home] = out.get(home, 0.0) + self._hop(task, home, home)
        return out

    def _hop(self, task: str, device: str, home: str) -> float:
        """``task``'s output's hop between ``device`` and its host memory, and the network from ``home``'s
        server where that is another one."""
        key = (task, device, self.server[home] != self.server[device])
        if key not in self._hops:
            platform = self.problem.platform
            item = self.problem.graph.by_id[task]
            t = platform.hop_time(item, platform.by_name[device])
            if key[2]:  # the plan was simulated, so a platform of several servers has a network
                t += platform.network.time(item.output_bytes) if platform.network else 0.0
            self._hops[key] = t
        return self._hops[key]

    def _peer(self, task: str, a: str, b: str) -> float | None:
        """``task``'s output's time over the peer link between ``a`` and ``b`` (None: none)."""
        peer = self.problem.platform.peer_links.get(frozenset((a, b))) if self.problem.platform.peer_links else None
        return None if peer is None else peer.time(self.problem.graph.by_id[task].output_bytes)

    def _after(self, block: tuple[int, ...], target: str) -> tuple[dict[str, float], dict[str, tuple[Counter, dict]]]:
        """The change of every device's load if the classes of ``block`` (all on one device) move to
        ``target``, and the producers' new readers and charges."""
        source = self.device[block[0]]
        graph = self.problem.graph
        delta = {source: -sum(self.time(c, source) or 0.0 for c in block),
                 target: sum(self.time(c, target) or 0.0 for c in block)}
        members = {t for c in block for t in self.members[c]}
        changed = {}
        for p in sorted({p for c in block for p in self.touched[c]}):
            readers = Counter(self.readers[p])
            for v in graph.successors[p]:
                if v in members:
                    readers[source] -= 1
                    readers[target] += 1
            home = target if p in members else self.device[self.class_of[p]]
            charge = self._charge(p, home, readers)
            for d, x in charge.items():
                delta[d] = delta.get(d, 0.0) + x
            for d, x in self.charge[p].items():
                delta[d] = delta.get(d, 0.0) - x
            changed[p] = (readers, charge)
        return delta, changed

    def relieve(self, watch: Stopwatch, hops_alone: bool = True) -> bool:
        """Make the best move off the device of the largest load (above); False where none lowers it.
        ``hops_alone``: views and relays too, moves that carry no compute and only save hops."""
        source = max(self.load, key=self.load.__getitem__)
        limit = self.load[source] * (1 - SLACK)
        singles = [(c,) for c, d in enumerate(self.device) if d == source and (hops_alone or self.time(c, d))]
        best = None
        for blocks in (singles, self._relays(source) if hops_alone else (), self._islands(source),
                       self._blocks(source)):  # generators: a later kind is not built once one has moved
            best = self._best(blocks, limit, watch)
            if best is not None:
                break
        if best is None:
            return False
        _, block, target, delta, changed = best
        for d, x in delta.items():
            self.load[d] += x
        home = self.device[block[0]]
        for c in block:
            self.used[home] -= self.memory[c]
            self.used[target] += self.memory[c]
            self.device[c] = target
        for p, (readers, charge) in changed.items():
            self.readers[p], self.charge[p] = readers, charge
        return True

    def _best(self, blocks, limit: float, watch: Stopwatch):
        """The move of one of ``blocks`` (each on one device) to another device whose largest changed load is
        least and below ``limit``: (that load, block, target, load changes, producers' changes), or None."""
        best = None
        for block in blocks:
            if watch.expired:
                break
            memory = sum(self.memory[c] for c in block)
            home = self.device[block[0]]
            for target in self.load:
                times = [self.time(c, target) for c in block] if target != home else [None]
                if (any(t is None for t in times) or self.used[target] + memory > self.capacity[target]
                        or self.load[target] + sum(t or 0.0 for t in times) >= (best[0] if best else limit)):
                    continue
                delta, changed = self._after(block, target)
                peak = max(self.load[d] + x for d, x in delta.items())
                if peak < (best[0] if best else limit):
                    best = (peak, block, target, delta, changed)
        return best

    def _relays(self, source: str):
        """Classes of no compute elsewhere whose output ``source`` reads from another server: moved to a
        device of the source's server (its host CPU), they take the network off the source."""
        server = self.server
        seen: set[int] = set()
        for c, d in enumerate(self.device):
            if d != source:
                continue
            for u in self.touched[c]:  # its producers outside it (and its own, on the source: not relays)
                r = self.class_of[u]
                if r not in seen and server[self.device[r]] != server[source] and self.time(r, self.device[r]) == 0:
                    seen.add(r)
                    yield (r,)

    def _islands(self, source: str):
        """The connected sets of 2 to :data:`BLOCK` classes that ``source`` holds among those of little memory
        (each at most :data:`LIGHT` of the source's memory): work that may leave its weights' device."""
        graph = self.problem.graph
        light = {c for c, d in enumerate(self.device)
                 if d == source and self.memory[c] <= LIGHT * self.capacity[source]}
        seen: set[int] = set()
        for c in self.order:
            if c not in light or c in seen:
                continue
            island, stack = [], [c]
            seen.add(c)
            while stack:
                a = stack.pop()
                island.append(a)
                for t in self.members[a]:
                    for b in (self.class_of[x] for x in (*graph.successors[t], *graph.predecessors[t])):
                        if b in light and b not in seen:
                            seen.add(b)
                            stack.append(b)
            if 2 <= len(island) <= BLOCK and any(self.time(a, source) for a in island):
                yield tuple(sorted(island))

    def _blocks(self, source: str):
        """The runs of 2 to :data:`BLOCK` classes at either end of each run of consecutive classes (in a
        topological order) that ``source`` holds: moved together, they cut no new tensor inside them."""
        order = self.order
        k = 0
        while k < len(order):
            if self.device[order[k]] != source:
                k += 1
                continue
            end = k
            while end < len(order) and self.device[order[end]] == source:
                end += 1
            run = order[k:end]
            for n in range(2, min(BLOCK, len(run)) + 1):
                yield tuple(run[:n])
                if n < len(run):
                    yield tuple(run[-n:])
            k = end

    def placement(self) -> dict[str, str]:
        return {t: self.device[c] for c, m in enumerate(self.members) for t in m}
