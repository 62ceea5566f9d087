"""Pipeline splits of training graphs: the DP searches exactly the contiguous splits the validator accepts.

Orphan backward nodes (gradient accumulations without a colour class, losses flagged backward) stand in
the forward order between their consumers' and producers' stages (Tarnawski et al. 2020); the DP, the
contiguous IP and a brute force over every placement must agree on hand-made and generated graphs.
"""

import random
from itertools import product

import pytest

import diviml
from diviml import Objective, Problem
from diviml.frontends.neurips2020 import graph_from_scenario, platform_from_scenario
from diviml.simulate import pipeline_loads
from diviml.validate import contiguity_violations, validate


def scenario(nodes, edges, k=2, l=1, memory=1e12) -> dict:
    """A NeurIPS 2020 scenario dict: nodes (id, fwd time, backward?, colour or None), edges (src, dst, cost)."""
    return {"maxFPGAs": k, "maxCPUs": l, "maxSizePerFPGA": memory,
            "nodes": [{"id": i, "cpuLatency": 10 * t, "fpgaLatency": t, "isBackwardNode": bwd, "size": 1.0,
                       **({} if colour is None else {"colorClass": colour})} for i, t, bwd, colour in nodes],
            "edges": [{"sourceId": a, "destId": b, "cost": c} for a, b, c in edges]}


def problem(data, contiguous=True) -> Problem:
    return Problem(graph_from_scenario(data), platform_from_scenario(data),
                   Objective("pipeline", contiguous=contiguous))


def brute_force(p: Problem, keep=lambda placement: True) -> float:
    """Best max-load over every placement of the stage order's units that the validator calls contiguous
    (and ``keep`` accepts)."""
    units = list(p.stage_order.units.values())
    devices = [d.name for d in p.platform.devices]
    best = float("inf")
    for combo in product(devices, repeat=len(units)):
        placement = {t: d for members, d in zip(units, combo) for t in members}
        if (any(d not in p.allowed_devices[t] for t, d in placement.items()) or not keep(placement)
                or contiguity_violations(p, placement)):
            continue
        best = min(best, pipeline_loads(p, placement).objective)
    return best


def branching_net(acc_cost: float) -> dict:
    """f1 feeds f2 and f3, which meet in f4; the backward pass sums f1's two gradients in an orphan node
    (id 9, no colour class) that b2 and b3 produce and b1 consumes; b2's and b3's outputs cost 5 to move,
    the sum ``acc_cost``."""
    nodes = [(1, 4.0, False, 1), (2, 3.0, False, 2), (3, 3.0, False, 3), (4, 2.0, False, 4),
             (11, 4.0, True, 1), (12, 3.0, True, 2), (13, 3.0, True, 3), (14, 2.0, True, 4), (9, 0.5, True, None)]
    edges = [(1, 2, 1.0), (1, 3, 1.0), (2, 4, 1.0), (3, 4, 1.0), (1, 11, 1.0), (2, 12, 1.0), (3, 13, 1.0),
             (4, 14, 1.0), (14, 12, 1.0), (14, 13, 1.0), (12, 9, 5.0), (13, 9, 5.0), (9, 11, acc_cost)]
    return scenario(nodes, edges, k=2, l=0)


def test_an_orphan_accumulation_may_sit_on_its_producers_stage_when_that_is_optimal():
    p = problem(branching_net(acc_cost=0.1))
    plan = diviml.solve(p, "dp", time_limit=30)
    assert validate(plan, p).ok and plan.status == "optimal"
    assert plan.objective == pytest.approx(brute_force(p), rel=1e-12)
    # the optimum splits f1 from f2..f4 and keeps the sum with its producers b2, b3 (one cheap hop, not two)
    assert plan.placement["9"] == plan.placement["12"] == plan.placement["13"] != plan.placement["11"]
    with_its_consumer = brute_force(p, keep=lambda placement: placement["9"] == placement["11"])
    assert plan.objective < with_its_consumer - 1  # the old rule (an orphan follows a consumer) misses it


def test_an_orphan_may_sit_on_any_stage_from_its_consumers_to_its_producers_and_nowhere_else():
    p = problem(branching_net(acc_cost=0.1) | {"maxFPGAs": 3})
    stages = {"1": "acc0", "11": "acc0", "2": "acc1", "3": "acc1", "12": "acc1", "13": "acc1",
              "4": "acc2", "14": "acc2"}
    for device, contiguous in (("acc0", True), ("acc1", True), ("acc2", False)):
        assert (contiguity_violations(p, stages | {"9": device}) == []) == contiguous, device
    alone = {t: "acc0" for t in stages} | {"9": "acc1"}  # its own stage, between b1's and b2's: a cycle
    assert contiguity_violations(p, alone)


def test_a_loss_class_with_several_members_is_ordered_after_the_last_forward_stage():
    # f1 -> f2 -> (loss: two backward nodes sharing colour 7) -> b2 -> b1
    nodes = [(1, 5.0, False, 1), (2, 5.0, False, 2), (11, 5.0, True, 1), (12, 5.0, True, 2),
             (21, 1.0, True, 7), (22, 1.0, True, 7)]
    edges = [(1, 2, 1.0), (2, 21, 0.2), (21, 22, 0.2), (22, 12, 0.2), (12, 11, 1.0), (1, 11, 1.0), (2, 12, 1.0)]
    p = problem(scenario(nodes, edges, k=3, l=0))
    assert ("g:color2", "g:color7") in p.stage_order.edges  # b2 consumes the loss: f2's stage comes first
    plan = diviml.solve(p, "dp", time_limit=30)
    assert validate(plan, p).ok
    assert plan.placement["21"] == plan.placement["22"]
    assert plan.objective == pytest.approx(brute_force(p), rel=1e-12)
    ip = diviml.solve(p, "ip", time_limit=30, engine="highs")
    assert ip.objective == pytest.approx(plan.objective, rel=1e-9)


def random_training_scenario(n: int, seed: int, k: int = 2, l: int = 1) -> dict:
    """A forward DAG of n layers, its mirrored backward pass (twins share a colour class), an orphan
    accumulation node for every layer with several consumers, and a loss class of two backward nodes."""
    rng = random.Random(seed)
    nodes, edges = [], []
    consumers: dict[int, list[int]] = {i: [] for i in range(n)}
    for i in range(n):
        nodes.append((i, rng.uniform(1, 5), False, i))
        nodes.append((100 + i, rng.uniform(1, 8), True, i))
        edges.append((i, 100 + i, rng.uniform(0.1, 2)))
        for j in rng.sample(range(i), min(i, rng.choice((1, 1, 2)))):
            edges.append((j, i, rng.uniform(0.1, 2)))
            consumers[j].append(i)
    sinks = [i for i in range(n) if not consumers[i]]
    nodes += [(200, 0.5, True, 99), (201, 0.5, True, 99)]  # the loss
    edges += [(s, 200, 0.3) for s in sinks] + [(200, 201, 0.3)] + [(201, 100 + s, 0.3) for s in sinks]
    for j in range(n):
        if len(consumers[j]) > 1:  # gradients of j's output summed by an orphan node
            nodes.append((300 + j, rng.uniform(0.1, 1), True, None))
            edges += [(100 + c, 300 + j, rng.uniform(0.5, 3)) for c in consumers[j]]
            edges.append((300 + j, 100 + j, rng.uniform(0.1, 2)))
        elif consumers[j]:
            edges.append((100 + consumers[j][0], 100 + j, rng.uniform(0.1, 2)))
    return scenario(nodes, edges, k=k, l=l)


@pytest.mark.parametrize("seed", range(6))
def test_dp_ip_and_brute_force_agree_on_generated_training_graphs(seed):
    p = problem(random_training_scenario(5, seed))
    dp = diviml.solve(p, "dp", time_limit=30)
    ip = diviml.solve(p, "ip", time_limit=30, engine="highs")
    assert validate(dp, p).ok and validate(ip, p).ok
    assert dp.objective == pytest.approx(brute_force(p), rel=1e-9)
    assert ip.status == "optimal" and ip.objective == pytest.approx(dp.objective, rel=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_dp_and_ip_agree_on_larger_generated_training_graphs(seed):
    p = problem(random_training_scenario(12, seed, k=3))
    dp = diviml.solve(p, "dp", time_limit=60)
    ip = diviml.solve(p, "ip", time_limit=60, engine="highs")
    assert validate(dp, p).ok and ip.status == "optimal"
    assert ip.objective == pytest.approx(dp.objective, rel=1e-9)
