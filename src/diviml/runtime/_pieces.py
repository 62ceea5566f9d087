"""Cut a captured program into per-device pieces by a plan.

A *piece* is a run of consecutive tasks in one device's plan order, compiled into one
``torch.fx.GraphModule`` so Python dispatch is paid once per piece, not per operator. A piece ends after a
task whose output another device reads and before a task that reads another device's output: its inputs are
all needed when it starts and its outputs all leave when it ends, the synchronisation points the plan's own
timeline has. Parameters and buffers are not tasks: each piece reads them as inputs, held on its device.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..frontends.pytorch import task_of_nodes


@dataclass(frozen=True)
class Piece:
    device: str  # plan device
    index: int  # position in its device's order
    tasks: tuple[str, ...]
    module: object  # torch.fx.GraphModule
    inputs: tuple[str, ...]  # value names read (other pieces' outputs, user inputs, state)
    outputs: tuple[str, ...]  # value names other pieces or the program's result read


@dataclass(frozen=True)
class Program:
    """A captured model cut by a plan: per device its pieces in order, and where every value comes from."""
    pieces: dict[str, tuple[Piece, ...]]  # plan device -> pieces in plan order
    producer: dict[str, str]  # value name -> plan device producing it (user inputs: their task's device)
    inputs: tuple[str, ...]  # user input placeholders, in call order
    state: tuple[str, ...]  # parameter / buffer / constant placeholders
    results: tuple[str, ...]  # value names of the program's flat outputs


def cut(captured, device_order: dict[str, list[str]], task_of: dict[str, str] | None = None, *,
        max_tasks: int | None = None) -> Program:
    """The program's pieces for a plan's device order (device -> its tasks in order); ``task_of`` maps fx
    nodes to those tasks (by default the profile's task ids, :func:`task_of_nodes`). ``max_tasks`` also ends a
    piece after that many tasks (1: a piece per task), which measures what the runtime costs per piece."""
    import torch
    from torch.utils import _pytree

    gm = captured.gm
    nodes = {n.name: n for n in gm.graph.nodes}
    task_of = task_of if task_of is not None else task_of_nodes(captured)
    user = list(captured.user_inputs)
    device_of = {t: d for d, ts in device_order.items() for t in ts}
    check_plan_tasks(set(task_of.values()), set(device_of))
    state = tuple(n.name for n in gm.graph.nodes if n.op == "placeholder" and n.name not in user)
    members: dict[str, list[str]] = {}  # task -> its fx nodes in program order
    for node in gm.graph.nodes:
        if node.name in task_of and node.op != "placeholder":
            members.setdefault(task_of[node.name], []).append(node.name)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    flat = _pytree.tree_leaves(output.args[0])
    results = tuple(a.name for a in flat if isinstance(a, torch.fx.Node))
    if len(results) != len(flat):
        raise InputError("the model returns constants beside tensors: only tensor outputs can be checked")

    readers, consumers = _readers(gm, task_of, device_of, results)
    pieces: dict[str, tuple[Piece, ...]] = {}
    for device, order in device_order.items():
        built = []
        for run in _runs(order, device, members, nodes, task_of, device_of, readers, max_tasks):
            names = [n for t in run for n in members.get(t, [])]
            if names:
                built.append(_piece(gm, nodes, names, device, len(built), tuple(run), consumers))
        pieces[device] = tuple(built)
    producer = {v: device_of[t] for v, t in task_of.items()}
    return Program(pieces, producer, tuple(user), state, results)


def check_plan_tasks(tasks: set[str], planned: set[str]) -> None:
    """InputError unless the plan places exactly the model's tasks (a plan of another model, or of a graph
    profiled by another diviml)."""
    missing, extra = sorted(tasks - planned), sorted(planned - tasks)
    if missing or extra:
        what = ([f"{len(missing)} of the model's tasks are not in the plan (e.g. {missing[:3]})"] if missing else []) \
            + ([f"{len(extra)} plan tasks are not in the model (e.g. {extra[:3]})"] if extra else [])
        raise InputError(f"the plan does not belong to this model's graph: {', '.join(what)}; schedule the graph "
                         "that 'diviml profile' wrote for this model")


def _readers(gm, task_of: dict, device_of: dict, results: tuple) -> tuple[dict, dict]:
    """Per value: the devices reading it ("result" for the model's outputs), and the nodes reading it."""
    readers: dict[str, set[str]] = {}
    consumers: dict[str, set[str]] = {r: {"result"} for r in results}
    for node in gm.graph.nodes:
        if node.name not in task_of or node.op == "placeholder":
            continue
        for a in node.all_input_nodes:
            if a.name in task_of:
                readers.setdefault(a.name, set()).add(device_of[task_of[node.name]])
                consumers.setdefault(a.name, set()).add(node.name)
    for r in results:
        readers.setdefault(r, set()).add("result")
    return readers, consumers


def _runs(order: list[str], device: str, members: dict, nodes: dict, task_of: dict, device_of: dict, readers: dict,
          max_tasks: int | None) -> list[list[str]]:
    """A device's tasks in order, grouped into runs that become pieces: a run ends before a task that reads
    another device's value, after one whose value another device or the result reads, or at ``max_tasks``."""
    runs: list[list[str]] = []
    for t in order:
        reads_remote = any(device_of.get(task_of.get(a.name, ""), device) != device
                           for n in members.get(t, []) for a in nodes[n].all_input_nodes)
        if (not runs or reads_remote or _leaves(runs[-1][-1], members, readers, device)
                or (max_tasks is not None and len(runs[-1]) >= max_tasks)):
            runs.append([])
        runs[-1].append(t)
    return runs


def _leaves(task: str, members, readers, device: str) -> bool:
    """Does a value of ``task`` go to another device or out of the program?"""
    return any(readers.get(n, set()) - {device} for n in members.get(task, [task]))


def _piece(gm, nodes, names: list[str], device: str, index: int, tasks: tuple[str, ...], consumers) -> Piece:
    import torch
    inside = set(names)
    graph = torch.fx.Graph()
    env: dict[str, object] = {}
    inputs: list[str] = []
    for n in names:
        for a in nodes[n].all_input_nodes:
            if a.name in inside or a.name in env:
                continue
            if a.op == "get_attr":  # a torch.fx capture's weight or constant: read off the piece's own module
                env[a.name] = graph.node_copy(a)
            else:
                env[a.name] = graph.placeholder(a.name)
                inputs.append(a.name)
    for n in names:
        env[n] = graph.node_copy(nodes[n], lambda a: env[a.name])
    outputs = tuple(n for n in names if consumers.get(n, set()) - inside)  # read by a later piece or returned
    graph.output(tuple(env[n] for n in outputs))
    return Piece(device, index, tasks, torch.fx.GraphModule(gm, graph), tuple(inputs), outputs)


def piece_stages(program: Program) -> dict[tuple[str, int], int]:
    """Each piece's *stage* in a stream of requests: the most device changes on any path into it, where a
    path follows values between pieces and each device's order (a piece is at least at the stage of the piece
    before it on its device and of its producers on its device, and one past any producer on another device).

    A worker streaming requests runs piece ``p`` of request ``r`` in *slot* ``r + stage(p)``, its slots in
    turn. A value from another device then always comes from an earlier slot, so in steady state every device
    runs a whole request's worth of its pieces each slot, each for its own request, and waits for no device
    within it: a request every slot, at the pace of the most loaded device, as a pipeline plan's objective
    has it. Run one request after another instead, a plan whose values go back and forth between devices
    would run each request at its latency. The pieces are walked in producer order (Kahn), not recursively,
    so a program of thousands of pieces is fine."""
    made_by = {v: (d, p.index) for d, ps in program.pieces.items() for p in ps for v in p.outputs}
    feeds: dict[tuple[str, int], list[tuple[tuple[str, int], int]]] = {}  # piece -> [(reader, step)]
    waiting: dict[tuple[str, int], int] = {}
    for d, ps in program.pieces.items():
        for p in ps:
            # the piece before it on its device too: so each request's pieces run on a device in its order,
            # and a value dropped after its last reader in that order is not read again
            sources = ({made_by[v] for v in p.inputs if v in made_by} | ({(d, p.index - 1)} if p.index else set())) \
                - {(d, p.index)}
            waiting[d, p.index] = len(sources)
            for s in sources:
                feeds.setdefault(s, []).append(((d, p.index), int(s[0] != d)))
    stage = {k: 0 for k in waiting}
    ready = [k for k, n in waiting.items() if n == 0]
    while ready:
        k = ready.pop()
        for reader, step in feeds.get(k, ()):
            stage[reader] = max(stage[reader], stage[k] + step)
            waiting[reader] -= 1
            if waiting[reader] == 0:
                ready.append(reader)
    return stage
