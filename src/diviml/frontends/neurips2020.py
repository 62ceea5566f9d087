"""The NeurIPS 2020 device-placement format (Tarnawski et al., msr-fiddle/dnn-partitioning).

A scenario file holds the graph and the machine: ``maxFPGAs`` = k accelerators, ``maxCPUs`` = l CPU
cores, ``maxSizePerFPGA`` = memory per accelerator. Its cost model is expressed exactly:

- node times: ``cpuLatency`` on device type ``cpu``, ``fpgaLatency`` on type ``accelerator``;
  ``supportedOnFpga`` false restricts a node to the CPU;
- an edge ``cost`` is the time to move the producer's output between an accelerator and host memory;
  it becomes the producer's ``transfer_time`` (one hop). CPUs are host CPUs: their hops are free;
- ``size`` is the node's accelerator memory; CPUs have no memory limit; ``colorClass`` is a
  co-location group; ``isBackwardNode`` marks the backward phase of training graphs.

Times are kept in the file's unit (not stated by the authors; milliseconds is likely): the graph's
``time_unit`` says "ms?" and no conversion is made, so values compare directly with theirs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

from ..errors import InputError
from ..files import read_json
from ..graph import Task, TaskGraph, whole_number
from ..graph import _num as _json_num
from ..plan import Plan
from ..platform import MAX_COUNT, Device, Link, Platform

CPU = "cpu"
ACCELERATOR = "accelerator"
TIME_UNIT = "ms?"


def is_scenario(data) -> bool:
    return isinstance(data, Mapping) and "maxFPGAs" in data and "nodes" in data


def node_id(raw) -> str:
    return str(raw)


def graph_from_scenario(data: Mapping, name: str = "scenario") -> TaskGraph:
    try:
        transfer: dict[str, float] = {}
        edges = []
        for e in data["edges"]:
            a, b = node_id(e["sourceId"]), node_id(e["destId"])
            cost = _json_num(e["cost"])
            transfer[a] = max(transfer.get(a, 0.0), cost)
            edges.append((a, b))
        tasks = []
        for n in data["nodes"]:
            i = node_id(n["id"])
            on_acc = _flag(n.get("supportedOnFpga", True), "supportedOnFpga")
            time = {CPU: _json_num(n["cpuLatency"])}
            if on_acc:
                time[ACCELERATOR] = _json_num(n["fpgaLatency"])
            colour = n.get("colorClass")
            tasks.append(Task(
                id=i, kind=str(n.get("name", "node")), time=time, memory_bytes=_json_num(n.get("size", 0.0)),
                transfer_time=transfer.get(i, 0.0), colocation=None if colour is None else f"color{colour}",
                phase="backward" if _flag(n.get("isBackwardNode", False), "isBackwardNode") else "forward",
                module=str(n["layerId"]) if n.get("layerId") is not None else None))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{name}: malformed NeurIPS 2020 scenario ({exc.__class__.__name__}: {exc})") from None
    return TaskGraph.create(tasks, edges, name=name, time_unit=TIME_UNIT)


def _flag(value, what: str) -> bool:
    """A node's true/false field (the authors' files write booleans and 0/1): any other value is refused, not
    read as true."""
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise ValueError(f"{what} must be true or false (or 1 or 0), got {value!r}")


def platform_from_scenario(data: Mapping, *, accelerators: int | None = None, cpus: int | None = None,
                           memory: float | None = None) -> Platform:
    """k identical accelerators (memory limit, staged through host) and l host CPU cores."""
    try:
        k = whole_number(data["maxFPGAs"] if accelerators is None else accelerators, "maxFPGAs", 0, MAX_COUNT)
        l = whole_number(data["maxCPUs"] if cpus is None else cpus, "maxCPUs", 0, MAX_COUNT)
        mem = memory if memory is not None else (
            _json_num(data["maxSizePerFPGA"]) if "maxSizePerFPGA" in data else math.inf)
    except KeyError as exc:
        raise InputError(f"malformed NeurIPS 2020 scenario: no {exc}") from None
    except ValueError as exc:
        raise InputError(f"malformed NeurIPS 2020 scenario: maxSizePerFPGA: {exc}") from None
    if k + l == 0:
        raise InputError(f"the scenario needs at least one device (got {k} accelerators, {l} CPUs)")
    # the link is never used for time (every task carries transfer_time); it marks a non-host device
    link = Link(bandwidth=1.0, latency=0.0)
    devices = [Device(f"acc{i}", ACCELERATOR, mem, "server0", False, link) for i in range(k)]
    devices += [Device(f"cpu{i}", CPU, math.inf, "server0", True) for i in range(l)]
    groups = tuple(g for g in (tuple(f"acc{i}" for i in range(k)), tuple(f"cpu{i}" for i in range(l))) if len(g) > 1)
    return Platform(tuple(devices), f"neurips2020(k={k}, l={l})", groups=groups,
                    description="NeurIPS 2020 scenario: k identical accelerators, l CPU cores; transfers staged "
                                "through host memory at the file's per-node costs")


def load_scenario(path: str | Path, **overrides) -> tuple[TaskGraph, Platform]:
    data = read_json(path)
    if not is_scenario(data):
        raise InputError(f"{path}: not a NeurIPS 2020 scenario (no 'maxFPGAs'/'nodes')")
    return graph_from_scenario(data, Path(path).stem), platform_from_scenario(data, **overrides)


def split_to_placement(split: Mapping, graph: TaskGraph, platform: Platform) -> dict[str, str]:
    """Placement from a split file ``{"fpgas": [{"nodes": [...]}...], "cpus": [...]}``.

    Nodes a training split leaves out follow their colour class's forward node (backward twins).
    """
    accs = [d.name for d in platform.devices if d.type == ACCELERATOR]
    cpus = [d.name for d in platform.devices if d.type == CPU]
    placement: dict[str, str] = {}
    try:
        for kind, names in (("fpgas", accs), ("cpus", cpus)):
            lists = split.get(kind, []) or []
            if len([x for x in lists if x.get("nodes")]) > len(names):
                raise InputError(f"the split uses {len(lists)} {kind} but the platform has {len(names)}: "
                                 "give a platform with enough devices (--accelerators/--cpus)")
            for dev, entry in zip(names, lists):
                for raw in entry.get("nodes", []):
                    nid = node_id(raw)
                    if nid not in graph.by_id:
                        raise InputError(f"the split places node {nid!r}, which the graph does not have")
                    if nid in placement:
                        raise InputError(f"the split places node {nid!r} twice")
                    placement[nid] = dev
    except (AttributeError, TypeError) as exc:
        raise InputError(f"malformed split file ({exc}): expected {{'fpgas': [{{'nodes': [...]}}], 'cpus': [...]}}") from None
    by_colour = {graph.by_id[t].colocation: d for t, d in placement.items() if graph.by_id[t].colocation}
    for t in graph.tasks:
        if t.id not in placement and t.colocation in by_colour:
            placement[t.id] = by_colour[t.colocation]
    missing = [t.id for t in graph.tasks if t.id not in placement]
    if missing:
        raise InputError(f"the split leaves {len(missing)} nodes unplaced (e.g. {missing[:5]}): place every "
                         "forward node")
    return placement


def load_split(path: str | Path, graph: TaskGraph, platform: Platform) -> dict[str, str]:
    return split_to_placement(read_json(path), graph, platform)


def plan_to_split(plan: Plan, platform: Platform, loads: Mapping[str, float] | None = None) -> dict:
    """A plan in the authors' split format (node ids as integers where they are)."""
    placement = plan.placement

    def ids(dev: str) -> list:
        return [int(t) if t.lstrip("-").isdigit() else t for t, d in placement.items() if d == dev]

    def entry(dev: str) -> dict:
        return {"load": (loads or {}).get(dev, -1), "nodes": ids(dev)}

    return {"fpgas": [entry(d.name) for d in platform.devices if d.type == ACCELERATOR],
            "cpus": [entry(d.name) for d in platform.devices if d.type == CPU],
            "maxLoad": plan.objective}
