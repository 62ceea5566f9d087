"""Benchmark: every solver on generated small problems at the edges of the model, against a reference optimum.

Each family draws random DAGs of 3-6 tasks (tasks that take no time, tasks barred from the GPUs or the CPU,
weights of 0-4 GB) on one of four platforms (a CPU and a GPU of tight memory; two such servers over a network;
two GPUs on a peer link; two servers of different GPUs) and runs every solver that claims the objective:

- ``pipeline`` (contiguous every third problem) and ``call-latency``: reference = the brute-force optimum over
  every placement that fits memory (and contiguity);
- ``latency``: reference = ``exact``'s plan where it proves it optimal;
- ``batch`` (2-4 requests): no reference, validity and time only;
- ``training``: each task with a backward twin, co-located, PipeDream or GPipe (brute force over the pairs);
- ``training-latency``: the same graphs, latency (reference: exact's proven optimum; where tasks that take
  no time once waited for long ones in exact's device order);
- ``large``: 30-200 tasks (:mod:`diviml.generators`) on a preset of 3-26 devices, latency, batch (4, 40 or the
  most, 4,096 requests) or pipeline: no reference, validity and the time limit (where model building once ran
  minutes over it, and the bounds and the validator, pricing every part size, twice the limit at 4,096).

A *defect* is a crash (any exception but diviml's own), a refusal that calls the solver's own plan invalid,
a plan the validator rejects, an objective below the reference, a bound above it, an ``optimal`` status
above it, or a run more than 2.5 s over its limit. Prints a table per family and solver and writes
benchmarks/results/edge_cases.md; the defects, if any, are listed below it with their seeds.

    python benchmarks/edge_cases.py                 # the committed table (about 10 minutes)
    python benchmarks/edge_cases.py --problems 10 --families pipeline
    python benchmarks/edge_cases.py --first-seed 1000     # new problems of the same families
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import time
from pathlib import Path

import diviml
from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.errors import DivimlError, ValidationError
from diviml.generators import layered_dag, random_dag
from diviml.problem import MAX_BATCH
from diviml.simulate import call_latency, pipeline_loads
from diviml.solvers import REGISTRY
from diviml.validate import contiguity_violations, validate

OUT = Path(__file__).parent / "results" / "edge_cases.md"
GB = 1e9
LIMIT_S, SLACK_S = 3.0, 2.5
FAMILIES = ("pipeline", "latency", "batch", "training", "training-latency", "call-latency", "large")
LARGE_SHARE = 10  # the large family draws a tenth as many problems: every solver runs to its limit there


def platform(rng: random.Random) -> Platform:
    """One of four shapes: a CPU and a GPU; two such servers; two GPUs on a peer link; two unlike servers."""
    link = Link(rng.choice([1.0, 4.0]), rng.choice([0.0, 0.05]))
    devices = [Device("c0", "cpu", rng.choice([1e12, 5 * GB]), "s0", is_host=True),
               Device("g0", "gpu", rng.choice([4, 6, 100]) * GB, "s0", link=link)]
    shape, peers, network = rng.choice(["one", "two", "peer", "unlike"]), {}, None
    if shape == "two":
        devices += [Device("c1", "cpu", 1e12, "s1", is_host=True), Device("g1", "gpu", devices[1].memory_bytes, "s1", link=link)]
        network = Link(rng.choice([0.5, 2.0]), 0.0)
    elif shape == "peer":
        devices.append(Device("g1", "gpu", rng.choice([4, 6]) * GB, "s0", link=link))
        peers = {frozenset(("g0", "g1")): Link(8.0, 0.0)}
    elif shape == "unlike":
        devices += [Device("h1", "gpu2", rng.choice([4, 100]) * GB, "s1", link=link), Device("c1", "cpu", 1e12, "s1", is_host=True)]
        network = Link(rng.choice([0.5, 2.0]), 0.0)
    return Platform(tuple(devices), peer_links=peers, network=network)


def graph(rng: random.Random, training: bool) -> TaskGraph:
    """3-6 tasks, each reading 1-2 earlier ones; with ``training``, each with a co-located backward twin."""
    n = rng.randint(3, 6)
    edges = sorted({(u, v) for v in range(1, n) for u in rng.sample(range(v), min(v, rng.randint(1, 2)))})
    tasks = []
    for i in range(n):
        g = rng.choice([0.0, rng.uniform(0.1, 2)])
        barred = rng.choice([None] * 6 + [frozenset({"cpu"}), frozenset({"gpu", "gpu2"})])
        tasks.append(Task(f"t{i}", {"gpu": g, "cpu": g * rng.uniform(1, 5), "gpu2": g * rng.uniform(0.5, 2)},
                          output_bytes=rng.choice([0.0, rng.uniform(0.1, 3)]), memory_bytes=rng.choice([0, 1, 2, 4]) * GB,
                          allowed_types=barred, colocation=f"c{i}" if training else None))
    links = [(f"t{u}", f"t{v}") for u, v in edges]
    if training:
        tasks += [Task("b" + t.id, {k: 2 * v for k, v in t.time.items()}, output_bytes=t.output_bytes,
                       colocation=t.colocation, phase="backward", allowed_types=t.allowed_types) for t in list(tasks)]
        sinks = [t.id for t in tasks if t.phase == "forward" and not any(u == t.id for u, _ in links)]
        links += [("b" + v, "b" + u) for u, v in links] + [(s, "b" + s) for s in sinks]
    return TaskGraph.create(tasks, links)


def large(rng: random.Random) -> Problem:
    """A generated DNN-like or randomly wired graph of 30-200 tasks on a preset, for one of three objectives."""
    platform = diviml.preset(rng.choice(["paper-server", "six-servers", "a100-ib-2x8", "h100-nvlink-8"]))
    types = tuple(sorted({d.type for d in platform.devices}, key=lambda t: t != "cpu"))
    graph = rng.choice([layered_dag, random_dag])(rng.choice([30, 80, 200]), seed=rng.randrange(1000), device_types=types)
    batch = Objective("batch", rng.choice([4, 40, MAX_BATCH]))
    objective = rng.choice([Objective("latency"), batch, Objective("pipeline", contiguous=rng.random() < 0.3)])
    return Problem(graph, platform, objective)


def objective(family: str, seed: int, rng: random.Random) -> Objective:
    """The family's objective: a third of the pipelines contiguous, 2-4 requests a batch, 1-3 calls."""
    if family in ("pipeline", "training"):
        training = rng.choice(["pipedream", "gpipe"]) if family == "training" else "pipedream"
        return Objective("pipeline", training=training, contiguous=seed % 3 == 0)
    if family == "training-latency":
        return Objective("latency")
    if family == "batch":
        return Objective("batch", rng.randint(2, 4))
    if family == "call-latency":
        return Objective("call-latency", max_calls=rng.randint(1, 3))
    return Objective(family)


def problem(family: str, seed: int) -> Problem | None:
    """The family's problem for ``seed``, or None where its memory cannot hold the graph."""
    rng = random.Random(f"{family}-{seed}")
    try:
        if family == "large":
            return large(rng)
        return Problem(graph(rng, family.startswith("training")), platform(rng), objective(family, seed, rng))
    except DivimlError:
        return None


def placements(p: Problem):
    """Every placement (co-location groups together) that fits memory, allowed devices and contiguity."""
    names = [d.name for d in p.platform.devices]
    units = [members for members in p.colocation_groups.values()] + [
        (t.id,) for t in p.graph.tasks if t.colocation not in p.colocation_groups]
    for combo in itertools.product(names, repeat=len(units)):
        placement = {t: d for members, d in zip(units, combo) for t in members}
        held = dict.fromkeys(names, 0.0)
        for t, d in placement.items():
            held[d] += p.graph.by_id[t].memory_bytes
        if any(d not in p.allowed_devices[t] for t, d in placement.items()) or any(
                held[d.name] > d.memory_bytes for d in p.platform.devices):
            continue
        if p.objective.contiguous and contiguity_violations(p, placement):
            continue
        yield placement


def reference(p: Problem) -> float | None:
    """The optimum: brute force (pipeline, call-latency), exact's proven one (latency), else None."""
    kind = p.objective.kind
    if kind == "latency":
        try:
            plan = diviml.solve(p, "exact", time_limit=20)
        except DivimlError:
            return None
        return plan.objective if plan.status == "optimal" else None
    best = math.inf
    for placement in placements(p) if kind in ("pipeline", "call-latency") else ():
        try:
            value = (pipeline_loads(p, placement).objective if kind == "pipeline"
                     else call_latency(p, placement).makespan)
        except ValidationError:  # more calls than allowed
            continue
        best = min(best, value)
    return best if kind in ("pipeline", "call-latency") else None


def defects(p: Problem, solver: str, optimum: float | None) -> tuple[str, list[str]]:
    """('plan' | 'refused', the defects found) of one solve."""
    started = time.perf_counter()
    try:
        plan = diviml.solve(p, solver, time_limit=LIMIT_S, seed=1)
    except ValidationError as exc:
        return "refused", [f"called its own plan invalid: {exc}"]
    except DivimlError:
        return "refused", (["refused where a plan fits"] if solver in ("ip", "call-exact", "exact", "milp")
                           and optimum is not None and math.isfinite(optimum) else [])
    except Exception as exc:  # noqa: BLE001 - what this benchmark is for
        return "refused", [f"crashed: {type(exc).__name__}: {exc}"]
    wall, out = time.perf_counter() - started, []
    if not validate(plan, p).ok:
        out.append("invalid plan")
    if wall > LIMIT_S + SLACK_S:
        out.append(f"{wall:.1f} s for a {LIMIT_S:g} s limit")
    if optimum is not None and math.isfinite(optimum):
        if plan.objective < optimum * (1 - 1e-6) - 1e-9:
            out.append(f"objective {plan.objective:.6g} below the optimum {optimum:.6g}")
        if plan.bound > optimum * (1 + 1e-6) + 1e-9:
            out.append(f"bound {plan.bound:.6g} ({plan.bound_source}) above the optimum {optimum:.6g}")
        if plan.status == "optimal" and plan.objective > optimum * (1 + 1e-5) + 1e-9:
            out.append(f"'optimal' at {plan.objective:.6g} above the optimum {optimum:.6g}")
    return "plan", out


def run(family: str, problems: int, first_seed: int = 0) -> tuple[list[str], list[str]]:
    """Table rows (one per solver) and the defects found, with their seeds (``first_seed`` onwards)."""
    counts: dict[str, dict[str, int]] = {}
    drawn: dict[str, int] = {}
    found = []
    for seed in range(first_seed, first_seed + (problems // LARGE_SHARE if family == "large" else problems)):
        p = problem(family, seed)
        if p is None:
            continue
        optimum = reference(p) if family != "large" else None
        for s in (s for s, info in REGISTRY.items() if p.objective.kind in info.objectives):
            counts.setdefault(s, {"plan": 0, "refused": 0, "defects": 0})
            drawn[s] = drawn.get(s, 0) + 1
            outcome, bad = defects(p, s, optimum)
            counts[s][outcome] += 1
            counts[s]["defects"] += len(bad)
            found += [f"{family} seed {seed}, {s}: {b}" for b in bad]
    rows = [f"| {family} | {s} | {drawn[s]} | {c['plan']} | {c['refused']} | {c['defects']} |" for s, c in counts.items()]
    return rows, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=60, help="seeds per family (default 60)")
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--first-seed", type=int, default=0, help="draw seeds from here on (default 0): new "
                        "problems of the same families")
    args = parser.parse_args()
    lines = ["| family | solver | problems | plans | refusals | defects |", "|---|---|---|---|---|---|"]
    found: list[str] = []
    for family in args.families:
        rows, bad = run(family, args.problems, args.first_seed)
        lines += rows
        found += bad
        print("\n".join(rows), flush=True)
    command = "python benchmarks/edge_cases.py" + (f" --problems {args.problems}" if args.problems != 60 else "") \
        + (f" --first-seed {args.first_seed}" if args.first_seed else "")
    text = "\n".join(["# Every solver at the edges of the model", "", f"`{command}`", "", *lines, "",
                      f"Each solve given {LIMIT_S:g} s on this 2-core machine. Refusals are diviml's own one-line "
                      "errors (memory, a solver's scope). Defects: " + ("none." if not found else ""), *found, ""])
    OUT.write_text(text)
    print(f"defects: {len(found)}; wrote {OUT}")


if __name__ == "__main__":
    main()
