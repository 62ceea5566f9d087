"""Shared fixtures: the NeurIPS 2020 data beside the checkout, and small hand-made problems."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from diviml import Device, Link, Platform, Task, TaskGraph
from diviml.simulate import latency

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "tarnawski2020"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The NeurIPS 2020 scenarios; a missing folder is a failure, never a skip."""
    assert DATA.is_dir(), f"NeurIPS 2020 data not found at {DATA}: check out shared/ beside the repository"
    return DATA


def two_device_platform(peer_bandwidth: float = 1.0) -> Platform:
    """P1 (type x) and P2 (type y) joined by a peer link: transfer time = output_bytes / bandwidth."""
    link = Link(1.0, 0.0)
    return Platform((Device("P1", "x", math.inf, "s", False, link), Device("P2", "y", math.inf, "s", False, link)),
                    "two", peer_links={frozenset(("P1", "P2")): Link(peer_bandwidth, 0.0)})


def two_servers() -> Platform:
    """Two identical servers, each a host CPU and two A100 on PCIe, joined by a network."""
    devices = []
    for s in ("s0", "s1"):
        devices += [{"name": f"{s}cpu", "type": "cpu", "server": s, "host": True},
                    {"name": f"{s}gpu", "type": "a100", "server": s, "count": 2, "memory": 40e9,
                     "link": {"bandwidth": 16e9, "latency": 1e-5}}]
    return Platform.from_dict({"devices": devices, "network": {"bandwidth": 12.5e9, "latency": 1e-5}})


def free_workers() -> Platform:
    """``cpu-workers-2`` with its hand-offs 0: a crossing between the two workers free, as it was priced before."""
    from dataclasses import replace

    from diviml import preset
    workers = preset("cpu-workers-2")
    return replace(workers, devices=tuple(replace(d, handoff=0.0) for d in workers.devices))


def workers_without_handoffs(where: Path) -> Path:
    """:func:`free_workers` as a platform file in ``where``: the plans of a tiny model then use both workers (the
    preset charges each crossing what it measures here, and keeps such a model on one), for tests of how the
    runtime cuts a plan and joins its parts."""
    import yaml
    path = where / "workers-without-handoffs.yaml"
    path.write_text(yaml.safe_dump(free_workers().to_dict()))
    return path


def graph(spec: dict[str, tuple[dict, float]], edges: list[tuple[str, str]], **task_extra) -> TaskGraph:
    """spec: id -> (times by device type, output bytes)."""
    tasks = [Task(id=t, time=times, output_bytes=out, **task_extra.get(t, {})) for t, (times, out) in spec.items()]
    return TaskGraph.create(tasks, edges)


@contextmanager
def busy_machine():
    """Two busy-looping processes per core for the duration: what a loaded machine does to wall-clock limits."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        yield
    finally:
        for p in burners:
            p.kill()
            p.wait()


def receiving(problem):
    """``problem`` on its platform with ``transfers: receiver``: the receiving device spends each transfer."""
    from dataclasses import replace

    from diviml import Problem
    return Problem(problem.graph, replace(problem.platform, transfers="receiver"), problem.objective)


def brute_force_latency(p) -> float:
    """Optimal makespan: every placement x every global topological order (device orders follow it)."""
    g = p.graph
    devices = {t: p.allowed_devices[t] for t in g.topological_order}
    orders = [o for o in itertools.permutations(g.topological_order)
              if all(o.index(a) < o.index(b) for a, b in g.edges)]
    best = math.inf
    for combo in itertools.product(*devices.values()):
        placement = dict(zip(devices, combo))
        for o in orders:
            per_device = {d.name: [t for t in o if placement[t] == d.name] for d in p.platform.devices}
            best = min(best, latency(p, placement, per_device).makespan)
    return best
