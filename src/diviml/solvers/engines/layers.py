"""A model's layers: its repeated blocks, read off the tasks' module paths.

A *layer* is a numbered block (``blocks.17.attn`` is layer 17 of ``blocks``; the numbered list holding the
most blocks wins); a task outside every block joins the layer of the task before it in topological order
(the embedding joins the first). A graph without numbered blocks has one layer per task. The layer-split
baselines cut runs of layers; the pipeline IP solves large models with each layer kept on one device.
"""

from __future__ import annotations

import re
from collections import Counter

from ...problem import Problem

__all__ = ["colocated_layers", "layers_of", "layer_memory", "numbered_blocks", "runs_from_choices"]

_NUMBERED = re.compile(r"^(.*?)\.(\d+)(?:\.|$)")


def layers_of(problem: Problem) -> list[list[str]]:
    """The tasks of each layer, layers in order, tasks in topological order.

    >>> from diviml import Task, TaskGraph, Platform, Problem, Device
    >>> tasks = [Task("embed", {"cpu": 1}), Task("a", {"cpu": 1}, module="blocks.0.attn"),
    ...          Task("b", {"cpu": 1}, module="blocks.1.mlp"), Task("head", {"cpu": 1})]
    >>> graph = TaskGraph.create(tasks, [("embed", "a"), ("a", "b"), ("b", "head")])
    >>> layers_of(Problem(graph, Platform((Device("cpu", "cpu", is_host=True),))))
    [['embed', 'a'], ['b', 'head']]
    """
    graph = problem.graph
    block_of = _block_of(problem)
    if block_of is None:
        return [[t] for t in graph.topological_order]
    layers: list[list[str]] = []
    index_of: dict[str, int] = {}
    pending: list[str] = []  # tasks before the first block
    for t in graph.topological_order:
        key = block_of[t]
        if key is not None and key not in index_of:
            index_of[key] = len(layers)
            layers.append(pending)
            pending = []
        if key is not None:
            layers[index_of[key]].append(t)
        elif layers:
            layers[-1].append(t)
        else:
            pending.append(t)
    if pending:
        layers.append(pending)
    return layers


def numbered_blocks(problem: Problem) -> list[list[str]]:
    """The tasks of each numbered block alone (:func:`layers_of` without the tasks outside every block),
    blocks in order, tasks in topological order; [] for a graph without numbered blocks.

    >>> from diviml import Task, TaskGraph, Platform, Problem, Device
    >>> tasks = [Task("embed", {"cpu": 1}), Task("a", {"cpu": 1}, module="blocks.0.attn"),
    ...          Task("b", {"cpu": 1}, module="blocks.1.mlp"), Task("head", {"cpu": 1})]
    >>> graph = TaskGraph.create(tasks, [("embed", "a"), ("a", "b"), ("b", "head")])
    >>> numbered_blocks(Problem(graph, Platform((Device("cpu", "cpu", is_host=True),))))
    [['a'], ['b']]
    """
    block_of = _block_of(problem) or {}
    out: dict[str, list[str]] = {}
    for t in problem.graph.topological_order:
        key = block_of.get(t)
        if key is not None:
            out.setdefault(key, []).append(t)
    return list(out.values())


def _block_of(problem: Problem) -> dict[str, str | None] | None:
    """Each task's block number in the numbered list holding the most blocks (then the most tasks), None for a
    task outside it; None for a graph without numbered blocks."""
    numbered = {t.id: _NUMBERED.match(t.module or "") for t in problem.graph.tasks}
    counts = Counter((m.group(1), m.group(2)) for m in numbered.values() if m)
    lists = Counter(prefix for prefix, _ in counts)
    if not lists:
        return None
    blocks = max(lists, key=lambda prefix: (lists[prefix], sum(n for (p, _), n in counts.items() if p == prefix)))
    return {t: m.group(2) if m and m.group(1) == blocks else None for t, m in numbered.items()}


def colocated_layers(problem: Problem) -> list[list[str]]:
    """:func:`layers_of` with each co-location group in the layer of its earliest member (a training graph's
    backward task in its forward twin's layer) and the layers left empty dropped, so that a run of layers
    keeps every group on one device."""
    layers = layers_of(problem)
    groups = problem.colocation_groups
    if not groups:
        return layers
    layer_of = {t: k for k, layer in enumerate(layers) for t in layer}
    home = {g: min(layer_of[t] for t in members) for g, members in groups.items()}
    out: list[list[str]] = [[] for _ in layers]
    for k, layer in enumerate(layers):
        for t in layer:
            group = problem.graph.by_id[t].colocation
            out[home[group] if group in home else k].append(t)
    return [layer for layer in out if layer]


def layer_memory(problem: Problem, layers: list[list[str]]) -> list[float]:
    """Resident bytes of each layer (its tasks' memory)."""
    return [sum(problem.graph.by_id[t].memory_bytes for t in layer) for layer in layers]


def runs_from_choices(order: list, choice: list[list[int]]) -> dict:
    """The runs a layer program chose, read back from its table: ``choice[k][j]`` is where the run of the
    ``k``-th stage of ``order`` starts when layers 0..j-1 are placed on the first k+1 stages. Returns stage ->
    (first layer, one past the last), in ``order``, stages given no layer left out.

    >>> runs_from_choices(["a", "b", "c"], [[0, 0, 0], [0, 1, 1], [0, 1, 2]])
    {'a': (0, 1), 'b': (1, 2)}
    """
    runs = {}
    j = len(choice[-1]) - 1
    for stage, took in zip(reversed(order), reversed(choice)):
        if took[j] < j:
            runs[stage] = (took[j], j)
        j = took[j]
    return dict(reversed(list(runs.items())))
