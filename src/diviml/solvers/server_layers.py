"""Latency of a model of layers over servers: a layer spread over one server's devices, servers in a chain.

The shape of LLM serving (tensor parallelism inside a server, pipeline stages across servers), derived rather
than assumed: one layer of the model's most common shape is scheduled *exactly* on each kind of server (the same
device types, memory and links), so that its parallel branches (a transformer's query, key and value
projections) run side by side where the links make that pay: on one server of a CPU and 4 A100 a GPT-3 layer
takes 0.340 s against 0.397 s on one A100. Runs of consecutive layers then go to the servers, in an order of
servers, by a dynamic program over (servers, layers placed) minimising the sum of the runs' times within every
device's memory, where each layer's schedule is shifted over the server's identical devices layer by layer, so
that its weights spread evenly over them. The same shifts in blocks (a run's layers of one shift, then those of
the next) put the same bytes on each device and hand the chain of layers from one device to the next once a
block, not once a layer or two, in as few blocks as the devices' memory allows: both are timed, and the better
kept (GPT-3 in BF16 over six-servers: 1.519 s layer by layer, 1.361 s in blocks). Layers of another shape (the
embedding, the head) run whole on the server's fastest device. The simulator then times the plan, transfers
included.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace

from ..graph import TaskGraph
from ..interchangeable import server_kind
from ..plan import Plan
from ..platform import Platform
from ..problem import Objective, Problem
from .engines.layers import layers_of, runs_from_choices
from .engines.plans import Stopwatch, make_plan

__all__ = ["layer_shape", "server_layer_plan"]

NAME = "server layers"
MIN_LAYERS = 8  # layers of the common shape: fewer, and the exact solvers see the whole model anyway
_CHAIN = "diviml: the chain of layers"  # the co-location group of a layer's ends in its one-layer problem
PATTERN_SHARE = 0.8  # of the time left, for the layer schedules of all kinds of server together


@dataclass(frozen=True)
class _Server:
    """A server's devices (platform order), its groups of identical devices (positions), and the exact
    schedule of one layer on it: device position per task position, and its makespan."""
    devices: tuple[str, ...]
    groups: tuple[tuple[int, ...], ...]
    pattern: tuple[int, ...]
    layer_time: float

    def shifted(self, device: str, shift: int) -> str:
        """The device ``shift`` places on from ``device`` within its group of identical devices."""
        spot = self.devices.index(device)
        for group in self.groups:
            if spot in group:
                return self.devices[group[(group.index(spot) + shift) % len(group)]]
        return device

    def placed(self, shift: int) -> tuple[str, ...]:
        """The layer schedule's device per task, shifted ``shift`` places over the identical devices."""
        return tuple(self.shifted(self.devices[p], shift) for p in self.pattern)


def server_layer_plan(problem: Problem, watch: Stopwatch) -> Plan | None:
    """The best plan of layer runs over servers (module doc) over three orders of servers, or None where the
    model has too few layers of one shape, the objective is not latency, or no order fits the memory."""
    if (problem.objective.kind != "latency" or problem.colocation_groups or problem.batch_size != 1
            or all(sum(not d.is_host for d in problem.platform.devices if d.server == server) < 2
                   for server in {d.server for d in problem.platform.devices})):
        return None  # no server with two accelerators to spread a layer over
    layers = layers_of(problem)
    shapes = [layer_shape(problem.graph, layer) for layer in layers]
    common, count = Counter(shapes).most_common(1)[0] if shapes else (None, 0)
    if count < MIN_LAYERS or len(layers) == len(problem.graph):
        return None
    typical = layers[[k for k, s in enumerate(shapes) if s == common][count // 2]]
    servers = _servers(problem, typical, Stopwatch(watch.left * PATTERN_SHARE))
    if not servers:
        return None
    costs = _Costs(problem, layers, [s == common for s in shapes], servers)
    speed = {k: server.layer_time for k, server in enumerate(servers)}
    best: Plan | None = None
    for order in (list(speed), sorted(speed, key=speed.__getitem__), sorted(speed, key=speed.__getitem__,
                                                                               reverse=True)):
        runs = costs.runs(order)
        if runs is None:
            continue
        for blocked in (True, False):
            if watch.expired and best is not None:
                break
            placement = costs.placement(runs, blocked)
            plan = make_plan(problem, placement=placement, solver=NAME, status="feasible", watch=watch, notes=[
                f"{len(layers)} layers in runs over servers, each layer spread over its server's devices"
                f"{', shifted in blocks' if blocked else ''}: " + ", ".join(
                    f"{servers[k].devices[0].rsplit('cpu', 1)[0] or servers[k].devices[0]} {j - i}"
                    for k, (i, j) in runs.items())])
            if best is None or plan.objective < best.objective:
                best = plan
    return best


def layer_shape(graph: TaskGraph, layer: list[str]) -> tuple:
    """What makes two layers the same: their tasks' kinds and times in order, and their internal edges."""
    position = {t: k for k, t in enumerate(layer)}
    kinds = tuple((graph.by_id[t].kind, tuple(sorted(graph.by_id[t].time.items()))) for t in layer)
    edges = tuple(sorted((position[u], position[v]) for u in layer for v in graph.successors[u] if v in position))
    return kinds, edges


def _servers(problem: Problem, layer: list[str], watch: Stopwatch) -> list[_Server]:
    """Every server with its exact one-layer schedule, solved once per kind of server; [] if one fails."""
    from . import exact  # a solver: imported when used (exact's baselines include this module's plan)
    platform = problem.platform
    names = list(dict.fromkeys(d.server for d in platform.devices))
    on = {name: tuple(d for d in platform.devices if d.server == name) for name in names}
    kinds = len({server_kind(platform, devices) for devices in on.values()})
    solved: dict[tuple, tuple[tuple[int, ...], float]] = {}
    out = []
    for name in names:
        devices = on[name]
        kind = server_kind(platform, devices)
        index = {d.name: i for i, d in enumerate(devices)}
        if kind not in solved:
            if watch.expired:  # a solve past the limit would hold the whole answer back (GPT-3 at 7 s: 1.8 s)
                return []
            sub = _one_layer(problem, layer, devices)
            plan = exact.solve(sub, time_limit=max(watch.left / (kinds - len(solved)), min(0.5, watch.left)))
            device_of = {a.task: a.device for a in plan.assignments}
            solved[kind] = (tuple(index[device_of[t]] for t in layer), plan.objective)
        pattern, makespan = solved[kind]
        groups = tuple(tuple(index[d] for d in g) for g in platform.identical_groups if g[0] in index)
        out.append(_Server(tuple(d.name for d in devices), groups, pattern, makespan))
    for d in platform.devices:  # a host CPU takes whole layers too: where the accelerators' memory runs out
        if d.is_host and all(d.name in problem.allowed_devices[t] for t in layer):
            out.append(_Server((d.name,), (), (0,) * len(layer), sum(problem.time(t, d.name) for t in layer)))
    return out


def _one_layer(problem: Problem, layer: list[str], devices) -> Problem:
    """The latency problem of ``layer`` alone on one server's ``devices``, its tasks that read the layer before
    and those read by the layer after on one device: the next layer starts where this one ends, as the chain
    of layers does (free to end elsewhere, GPT-3's BF16 layer on an A100 server took 27.25 ms against 27.70 ms
    alone, and each layer of the chain then paid a hand-off between GPUs: 1.361 -> 1.396 s over six-servers)."""
    graph, inside = problem.graph, set(layer)
    ends = {t for t in layer if any(u not in inside for u in graph.predecessors[t])
            or any(v not in inside for v in graph.successors[t])}
    tasks = [replace(graph.by_id[t], colocation=_CHAIN) if t in ends else graph.by_id[t] for t in layer]
    sub = TaskGraph.create(tasks, [(u, v) for u in layer for v in graph.successors[u] if v in inside],
                           name=f"{graph.name} layer", time_unit=graph.time_unit, batch_size=graph.batch_size)
    names = {d.name for d in devices}
    platform = problem.platform
    links = {pair: link for pair, link in platform.peer_links.items() if pair <= names}
    return Problem(sub, Platform(tuple(devices), "one server", peer_links=links, network=platform.network),
                   Objective("latency"))


class _Costs:
    """Per server and layer: its time there (the schedule's makespan, or the whole layer on the server's
    fastest device) and the bytes it leaves on each device; per layer, the hop of its outputs to another
    server (an estimate: the simulator times the plan)."""

    def __init__(self, problem: Problem, layers: list[list[str]], common: list[bool], servers: list[_Server]):
        self.problem, self.layers, self.common, self.servers = problem, layers, common, servers
        graph, platform = problem.graph, problem.platform
        ends = layers[0] + layers[-1]
        self.fastest = [min((d for d in s.devices if not platform.by_name[d].is_host), default=s.devices[0],
                            key=lambda d: sum(problem.time(t, d) for t in ends)) for s in servers]
        layer_of = {t: k for k, layer in enumerate(layers) for t in layer}
        here = platform.by_name[self.fastest[0]].server
        there = next((f for f in self.fastest if platform.by_name[f].server != here), self.fastest[0])
        self.hop = [sum(platform.transfer_time(graph.by_id[t], self.fastest[0], there) for t in layer
                        if any(layer_of[v] > k for v in graph.successors[t])) for k, layer in enumerate(layers)]
        self.time = [[s.layer_time if common[k] else sum(problem.time(t, self.fastest[j]) for t in layer)
                      for k, layer in enumerate(layers)] for j, s in enumerate(servers)]
        assigned = [self._assign(s) for s in range(len(servers))]
        self.assigned = [[devices for devices, _, _ in rows] for rows in assigned]
        self.bytes = [[held for _, held, _ in rows] for rows in assigned]  # per server, per layer: bytes per device
        self.shift = [[shift for _, _, shift in rows] for rows in assigned]
        self.capacity = self._capacities()

    def _assign(self, s: int) -> list[tuple[tuple[str, ...], dict[str, float], int]]:
        """Each layer's device per task on stage ``s`` and the bytes it puts on each device: its schedule (a
        layer of another shape: the fastest device), its identical devices shifted, layer by layer in order,
        so that the fullest device stays as empty as it can: the weights spread evenly, and the device holding
        the embedding takes fewer layers."""
        server, graph = self.servers[s], self.problem.graph
        held = dict.fromkeys(server.devices, 0.0)
        shifts = range(max((len(g) for g in server.groups), default=1))
        out = []
        for k, layer in enumerate(self.layers):
            best: tuple[float, tuple[str, ...], dict[str, float], int] | None = None
            for shift in shifts:
                devices = (server.placed(shift) if self.common[k]
                           else tuple(server.shifted(self.fastest[s], shift) for _ in layer))
                add: dict[str, float] = {}
                for d, t in zip(devices, layer):
                    add[d] = add.get(d, 0.0) + graph.by_id[t].memory_bytes
                fullest = max(held[d] + b for d, b in add.items())
                if best is None or fullest < best[0] * (1 - 1e-12):
                    best = (fullest, devices, add, shift)
            assert best is not None
            for d, b in best[2].items():
                held[d] += b
            out.append((best[1], best[2], best[3]))
        return out

    def _capacities(self) -> list[dict[str, float]]:
        """What each stage may hold on each of its devices: a host CPU's memory is the host stage's but for
        what its server's layer schedule could put on it were every layer there."""
        platform = self.problem.platform
        reserved: dict[str, float] = {}
        for s, server in enumerate(self.servers):
            if len(server.devices) > 1:
                for held in self.bytes[s]:
                    for device, b in held.items():
                        if platform.by_name[device].is_host:
                            reserved[device] = reserved.get(device, 0.0) + b
        out = []
        for server in self.servers:
            host_stage = len(server.devices) == 1 and platform.by_name[server.devices[0]].is_host
            out.append({d: (platform.by_name[d].memory_bytes - reserved.get(d, 0.0) if host_stage else
                            reserved.get(d, 0.0) if platform.by_name[d].is_host else
                            platform.by_name[d].memory_bytes) * (1 + 1e-9)
                        for d in server.devices})
        return out

    def runs(self, order: list[int]) -> dict[int, tuple[int, int]] | None:
        """Server -> (first layer, one past the last) minimising the sum of the runs' times over ``order``."""
        n = len(self.layers)
        best = [0.0] + [math.inf] * n
        choice = []
        for s in order:
            now, took = best[:], list(range(n + 1))
            for j in range(1, n + 1):
                held = dict.fromkeys(self.servers[s].devices, 0.0)
                total = 0.0
                for i in range(j - 1, -1, -1):  # the run i..j-1 on server s, grown leftwards
                    for device, b in self.bytes[s][i].items():
                        held[device] += b
                    if any(held[d] > self.capacity[s][d] for d in self.bytes[s][i]):
                        break
                    total += self.time[s][i]
                    value = best[i] + total + (self.hop[i - 1] if i > 0 else 0.0)
                    if value < now[j]:
                        now[j], took[j] = value, i
            best = now
            choice.append(took)
        return runs_from_choices(order, choice) if math.isfinite(best[n]) else None

    def placement(self, runs: dict[int, tuple[int, int]], blocked: bool = False) -> dict[str, str]:
        """Task -> device of the runs. ``blocked``: each run's layers of the common shape take the same shifts
        as layer by layer, so the same bytes on each device, but in blocks, one shift after another: a device
        hands the layers' chain on once a block, not once a layer or two (GPT-3 in BF16 over an H100 server
        moved its activations between the GPUs every layer, 1.1 ms a time)."""
        allowed = self.problem.allowed_devices
        out: dict[str, str] = {}
        for s, (i, j) in runs.items():
            server = self.servers[s]
            common = [k for k in range(i, j) if self.common[k]]
            shifts: dict[int, int] = {}
            if blocked and common:
                k = common[0] - 1  # the layer the chain comes from: in this run (another shape) or before it
                entry = self.assigned[s][k][-1] if k >= i else out.get(self.layers[k][-1]) if k >= 0 else None
                key = self._block_order(s, common, entry)
                shifts = self._fewest_blocks(s, (i, j), common, key) or dict(zip(common, sorted(
                    (self.shift[s][k] for k in common), key=key)))
            for k in range(i, j):
                devices = self.assigned[s][k]
                if k in shifts:
                    devices = server.placed(shifts[k])
                for t, device in zip(self.layers[k], devices):
                    out[t] = device if device in allowed[t] else self.fastest[s]
        return out

    def _block_order(self, s: int, layers: list[int], entry: str | None):
        """A sort key for the shifts of ``layers`` on stage ``s``: first the shift whose layer ends on ``entry``
        (the device the chain comes from: no hand-off into the first block), then as they first come up layer
        by layer."""
        server = self.servers[s]
        first: dict[int, int] = {}
        for k in layers:
            first.setdefault(self.shift[s][k], len(first))
        return lambda shift: (server.placed(shift)[-1] != entry, first.get(shift, len(first) + shift))

    def _fewest_blocks(self, s: int, run: tuple[int, int], common: list[int], key) -> dict[int, int] | None:
        """Layer -> shift for ``common``, the run's layers of the common shape on stage ``s``, in the fewest
        blocks of near-equal length (one shift each, in the order of ``key``) whose bytes every device holds
        with the run's other layers; None where that takes as many blocks as there are shifts (the shifts layer
        by layer then set the blocks' lengths). A run the first device holds alone stays on it: 9 of GPT-3's
        BF16 layers on an A100 server changed GPU three times for weights that fit one."""
        server, graph = self.servers[s], self.problem.graph
        layer = self.layers[common[0]]
        order = sorted(range(max((len(g) for g in server.groups), default=1)), key=key)
        others: dict[str, float] = dict.fromkeys(server.devices, 0.0)
        for k in range(*run):
            if not self.common[k]:
                for d, b in self.bytes[s][k].items():
                    others[d] += b
        for blocks in range(1, len(order)):
            held = dict(others)
            lengths = [len(common) // blocks + (b < len(common) % blocks) for b in range(blocks)]
            for shift, length in zip(order, lengths):
                for d, t in zip(server.placed(shift), layer):
                    held[d] += graph.by_id[t].memory_bytes * length
            if all(held[d] <= self.capacity[s][d] for d in held):
                spots = [shift for shift, length in zip(order, lengths) for _ in range(length)]
                return dict(zip(common, spots))
        return None
