"""Benchmark: candidate strengthenings of the batch path-work LP, measured (issue 25; none is used by the solvers).

Each row adds valid rows to the LP of :func:`diviml.bounds.batch_path_work_bound` (a batch of 8 on paper-server)
and reports its least makespan, so that the README's "Batch bounds" figures can be re-run and the next attempt
starts from them:

- **chains**: a task run whole keeps every other device off the tasks comparable to it, so along a chain S of the
  graph a device's work on the tasks comparable to all of S plus S's whole tasks on other devices fits in C
  (chains: a greedy cover of the graph by heaviest paths);
- **configurations**: parts of a chain's tasks that run at the same moment hold different samples, so
  configurations of part sizes (one per device, at most the batch in all), each given its time, cover every
  device's time on the chain;
- **pairs**: each edge's samples coupled between the two tasks' shares, each crossing priced at its own device
  pair's one-sample transfer (the LP prices every crossing at the cheapest pair's);
- **all three**, and the same **with at least two parts of every task** (a bound only of the plans that cut every
  task: where it rises far above, the LP's plans are the ones that run tasks whole).

``--milp SECONDS`` also solves "all three" with whole part counts (HiGHS): its proven bound, its best solution and
that solution's parts timed by the simulator. Prints a table and writes benchmarks/results/batch_relaxations.md.

    python benchmarks/batch_relaxations.py                       # the LP rows, about a minute
    python benchmarks/batch_relaxations.py --models resnet50 --milp 60
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from functools import partial
from pathlib import Path

import networkx as nx
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

import diviml
from diviml.bounds._batch import batch_path_work_lp, size_ranges
from diviml.bounds._lp import _KeyedLP, _least_makespan, _Sparse
from diviml.native import native_output_discarded
from diviml.simulate import schedule

sys.path.insert(0, str(Path(__file__).parent))
from split_models import model_graph  # noqa: E402  (zoo graphs with batch tables 1-8, cached)

OUT = Path(__file__).parent / "results" / "batch_relaxations.md"
MODELS = ("resnet50", "googlenet", "inception_v3", "gpt2-small")
CHAINS = 12  # at most this many chains in the cover


def chain_cover(problem: diviml.Problem, most: int = CHAINS) -> list[list[str]]:
    """Heaviest paths (whole-batch time on the fastest device) through tasks not yet covered, until all are."""
    graph, n = problem.graph, problem.batch_size
    weight = {t: min(problem.time(t, d, n) for d in problem.allowed_devices[t]) for t in graph.topological_order}
    covered: set[str] = set()
    chains: list[list[str]] = []
    while len(covered) < len(graph) and len(chains) < most:
        best: dict[str, float] = {}
        previous: dict[str, str | None] = {}
        for t in graph.topological_order:
            before = max(graph.predecessors[t], key=best.get, default=None)
            gain = weight[t] if t not in covered else 1e-9 * weight[t]
            best[t], previous[t] = (best[before] if before else 0.0) + gain, before
        chain, t = [], max(graph.topological_order, key=best.get)
        while t is not None:
            chain.append(t)
            t = previous[t]
        if covered.issuperset(chain):
            break
        covered.update(chain)
        chains.append(chain[::-1])
    return chains


def _work(problem: diviml.Problem, unit: float, task: str, device: str, r: int) -> float:
    """The LP's work coefficient of a sample of ``task`` on ``device`` in parts of size range ``r``."""
    lo, hi = size_ranges(problem.batch_size)[r]
    return min(problem.time(task, device, b) * unit / b for b in problem.pricing_sizes(task, device, lo, hi))


def add_chain_rows(problem: diviml.Problem, lp: _KeyedLP, unit: float, chains: list[list[str]]) -> None:
    """Per chain and device: its work on the tasks comparable to every task of the chain, plus the chain's tasks
    run whole (one part of the batch) on other devices, at most C."""
    graph, n = problem.graph, problem.batch_size
    ranges = size_ranges(n)
    whole = next(r for r, (lo, hi) in enumerate(ranges) if lo == hi == n)
    dag = nx.DiGraph(list(graph.edges))
    dag.add_nodes_from(graph.topological_order)
    related = {t: nx.ancestors(dag, t) | nx.descendants(dag, t) | {t} for t in graph.topological_order}
    for chain in chains:
        comparable = set.intersection(*(related[s] for s in chain))
        for d in (dev.name for dev in problem.platform.devices):
            row: dict = {("C",): -1.0}
            for t in comparable:
                for r in range(len(ranges)):
                    if lp.has(("u", t, d, r)):
                        row[("u", t, d, r)] = _work(problem, unit, t, d, r)
            for t in chain:
                for other in problem.allowed_devices[t]:
                    if other != d:
                        row[("u", t, other, whole)] = row.get(("u", t, other, whole), 0.0) + problem.time(t, other, n) * unit / n
            lp.ub(row)


def add_configurations(problem: diviml.Problem, lp: _KeyedLP, unit: float, chains: list[list[str]]) -> None:
    """Per chain: the time in each configuration of part sizes (a size range or none per device, their smallest
    sizes at most the batch) sums to at most C and covers each device's time on the chain in each range."""
    n, ranges = problem.batch_size, size_ranges(problem.batch_size)
    devices = [d.name for d in problem.platform.devices]
    configs = [c for c in itertools.product([None, *range(len(ranges))], repeat=len(devices))
               if any(r is not None for r in c) and sum(ranges[r][0] for r in c if r is not None) <= n]
    for tag, chain in enumerate(chains):
        _configuration_rows(problem, lp, unit, chain, configs, tag)


def _configuration_rows(problem: diviml.Problem, lp: _KeyedLP, unit: float, chain: list[str], configs: list,
                        tag: int) -> None:
    """Time in each configuration for ``chain``: in all at most C, and covering each device's time on the chain
    in each size range."""
    ranges = size_ranges(problem.batch_size)
    devices = [d.name for d in problem.platform.devices]
    for k in range(len(configs)):
        lp.col(("Z", tag, k))
    lp.ub({("C",): -1.0, **{("Z", tag, k): 1.0 for k in range(len(configs))}})
    for i, d in enumerate(devices):
        for r in range(len(ranges)):
            row = {("Z", tag, k): -1.0 for k, c in enumerate(configs) if c[i] == r}
            row.update({("u", t, d, r): _work(problem, unit, t, d, r) for t in chain if lp.has(("u", t, d, r))})
            lp.ub(row)


def add_pair_transfers(problem: diviml.Problem, lp: _KeyedLP, unit: float) -> None:
    """Per edge: a coupling of the two tasks' device shares, and the mean sample's path along it with each
    crossing priced at its device pair's transfer of one sample."""
    graph, n = problem.graph, problem.batch_size
    ranges = size_ranges(n)

    def share(t: str, d: str) -> dict:
        return {("u", t, d, r): 1.0 / n for r in range(len(ranges)) if lp.has(("u", t, d, r))}

    for u, v in graph.edges:
        pairs = [(a, b) for a in problem.allowed_devices[u] for b in problem.allowed_devices[v]]
        for a, b in pairs:
            lp.col(("F", u, v, a, b))
        lp.eq({("F", u, v, a, b): 1.0 for a, b in pairs})
        for a in problem.allowed_devices[u]:
            lp.ub({**share(u, a), **{("F", u, v, a, b): -1.0 for b in problem.allowed_devices[v]}})
        for b in problem.allowed_devices[v]:
            lp.ub({**share(v, b), **{("F", u, v, a, b): -1.0 for a in problem.allowed_devices[u]}})
        row = {("e", u): 1.0, ("e", v): -1.0}
        for d in problem.allowed_devices[v]:
            for r, (lo, hi) in enumerate(ranges):
                if lp.has(("u", v, d, r)):
                    row[("u", v, d, r)] = min(problem.time(v, d, b) for b in problem.pricing_sizes(v, d, lo, hi)) * unit / n
        row.update({("F", u, v, a, b): problem.transfer(u, a, b, 1.0 / graph.batch_size) * unit
                    for a, b in pairs if a != b})
        lp.ub(row)


def add_two_parts(problem: diviml.Problem, lp: _KeyedLP, unit: float) -> None:
    """At least two parts of every task: sum over sizes of samples / largest size of the range >= 2."""
    ranges = size_ranges(problem.batch_size)
    for t in problem.graph.topological_order:
        lp.ub({("u", t, d, r): -1.0 / hi for d in problem.allowed_devices[t] for r, (_, hi) in enumerate(ranges)
               if lp.has(("u", t, d, r))}, -2.0)


def whole_part_counts(problem: diviml.Problem, lp: _KeyedLP, unit: float, seconds: float) -> tuple[float, float, float]:
    """``lp`` with a whole number of parts of each size per task and device (HiGHS, ``seconds``): its proven bound,
    its best solution, and that solution's parts timed by the simulator (list order), all in seconds."""
    ranges = size_ranges(problem.batch_size)
    samples = [key for key in lp.index if key[0] == "u"]
    for key in samples:
        lp.col(("p", *key[1:]))
    a, low, high, row = _Sparse(), [], [], 0
    for rows, lows, highs in ((lp.rows_ub, [-np.inf] * len(lp.rows_ub), lp.rhs_ub),
                              (lp.rows_eq, [1.0] * len(lp.rows_eq), [1.0] * len(lp.rows_eq))):
        for coefficients, lo, hi in zip(rows, lows, highs):
            for j, x in coefficients.items():
                a.add(row, j, x)
            low.append(lo)
            high.append(hi)
            row += 1
    for key in samples:  # samples in parts of size b = b x parts (single sizes: a batch of at most 16)
        a.add(row, lp.index[key], 1.0)
        a.add(row, lp.index[("p", *key[1:])], -float(ranges[key[3]][0]))
        low.append(0.0)
        high.append(0.0)
        row += 1
    n_cols = len(lp.index)
    cost, integral = np.zeros(n_cols), np.zeros(n_cols)
    cost[lp.index[("C",)]] = 1.0
    for key in samples:
        integral[lp.index[("p", *key[1:])]] = 1.0
    with native_output_discarded():  # HiGHS's MILP prints a line now and then as it mends a solution
        res = milp(cost, constraints=LinearConstraint(a.matrix(row, n_cols), low, high), integrality=integral,
                   bounds=Bounds(0, np.inf), options={"time_limit": seconds, "disp": False})
    if res.x is None:
        return res.mip_dual_bound / unit, float("nan"), float("nan")
    parts = {t: [] for t in problem.graph.topological_order}
    for key in samples:
        parts[key[1]] += [(key[2], ranges[key[3]][0])] * round(res.x[lp.index[("p", *key[1:])]])
    return res.mip_dual_bound / unit, res.fun / unit, schedule(problem, parts).makespan


def row(name: str, milp_seconds: float) -> str:
    problem = diviml.Problem(model_graph(name), diviml.preset("paper-server"), diviml.Objective("batch", 8))
    chains = chain_cover(problem)
    started = time.perf_counter()

    def least(*steps) -> tuple[float, _KeyedLP, float]:
        lp, unit = batch_path_work_lp(problem, None)
        for step in steps:
            step(lp, unit)
        return _least_makespan((lp, unit), None) or 0.0, lp, unit

    chain_rows = partial(add_chain_rows, problem, chains=chains)
    configurations = partial(add_configurations, problem, chains=chains)
    pairs = partial(add_pair_transfers, problem)
    values = [least()[0], least(chain_rows)[0], least(configurations)[0], least(pairs)[0]]
    together, lp, unit = least(chain_rows, configurations, pairs)
    values += [together, least(chain_rows, configurations, pairs, partial(add_two_parts, problem))[0]]
    ms = 1e3
    cells = [name, str(len(chains))] + [f"{v * ms:.4f}" for v in values]
    if milp_seconds > 0:
        proven, best, timed = whole_part_counts(problem, lp, unit, milp_seconds)
        cells += [f"{proven * ms:.4f}", f"{best * ms:.4f}", f"{timed * ms:.2f}"]
    cells.append(f"{time.perf_counter() - started:.0f}")
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--milp", type=float, default=0.0, help="seconds for the whole-part-count program (0: not run)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    columns = ["model", "chains", "LP, ms", "+ chains", "+ configurations", "+ pairs", "all three",
               "all three, every task in >= 2 parts"]
    if args.milp > 0:
        columns += [f"whole part counts: proven in {args.milp:g} s", "its best", "its parts simulated"]
    head = "| " + " | ".join(columns + ["s"]) + " |\n" + "|---" * (len(columns) + 1) + "|\n"
    lines = []
    print(head, end="", flush=True)
    for name in args.models:
        lines.append(row(name, args.milp))
        print(lines[-1], flush=True)
    command = "python benchmarks/batch_relaxations.py" + (f" --milp {args.milp:g}" if args.milp > 0 else "")
    if args.models != list(MODELS):
        command += " --models " + " ".join(args.models)
    text = (f"# Candidate strengthenings of the batch path-work LP\n\n`{command}`\n\n" + head + "\n".join(lines)
            + "\n\nA batch of 8 on paper-server; least makespans in ms, each a lower bound of every batch plan "
            "except the column with at least two parts of every task (a bound of the plans that cut every task). "
            "None of these rows is used by the solvers: each of the three lifts the LP by at most about 1% (README, Design, "
            "\"Batch bounds\").\n")
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
