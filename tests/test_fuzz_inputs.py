"""Seeded mutations of the shipped example graph and preset, and of a plan for them: each one loads, schedules
and validates, or is refused with diviml's own error; never another exception."""

import copy
import json
import math
import random
from importlib import resources
from pathlib import Path

import pytest
import yaml

import diviml
from diviml import DivimlError, Objective, Plan, Platform, Problem, TaskGraph

EXAMPLE = json.loads((Path(__file__).parent.parent / "examples" / "layered40.json").read_text())
PRESET = yaml.safe_load((resources.files("diviml") / "presets" / "paper-server.yaml").read_text())
NASTY = [None, True, False, "", "x", "1e9", -1, 0, 1, 2.5, -0.0, 1e-300, 1e308, 10 ** 320, math.nan, math.inf,
         [], [1], {}, {"a": 1}, [[[[[]]]]]]


def paths(value, prefix=()):
    """Every place in a JSON-like value: (path, value) pairs."""
    yield prefix, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, prefix + (i,))


def mutated(base, rng: random.Random):
    data = copy.deepcopy(base)
    places = [p for p, _ in paths(data) if p]
    for _ in range(rng.randint(1, 3)):
        where = rng.choice(places)
        parent = data
        try:
            for key in where[:-1]:
                parent = parent[key]
            if rng.random() < 0.1 and isinstance(parent, dict):
                del parent[where[-1]]  # a field left out
            else:
                parent[where[-1]] = copy.deepcopy(rng.choice(NASTY))
        except (KeyError, IndexError, TypeError):  # an earlier mutation removed the path
            continue
    return data


@pytest.mark.parametrize("seed", range(300))
def test_a_mutated_graph_or_platform_is_scheduled_or_refused_with_a_clear_error(seed):
    rng = random.Random(seed)
    graph_data, platform_data = EXAMPLE, PRESET
    if seed % 2:
        graph_data = mutated(EXAMPLE, rng)
    else:
        platform_data = mutated(PRESET, rng)
    try:
        problem = Problem(TaskGraph.from_dict(graph_data), Platform.from_dict(platform_data), Objective("latency"))
        plan = diviml.solve(problem, "heft", time_limit=5)
    except DivimlError as exc:
        assert str(exc) and "\n" not in str(exc)  # one line for the CLI
        return
    assert diviml.validate(plan, problem).ok


@pytest.fixture(scope="module")
def batch_plan():
    problem = Problem(TaskGraph.from_dict(EXAMPLE), Platform.from_dict(PRESET), Objective("batch", 4))
    return problem, diviml.solve(problem, "data-parallel", time_limit=5).to_dict()


@pytest.mark.parametrize("seed", range(150))
def test_a_mutated_plan_is_validated_or_refused_with_a_clear_error(seed, batch_plan):
    # starts and batch sizes of the wrong type once crashed the validator (TypeError), a huge objective the loader
    problem, data = batch_plan
    try:
        report = diviml.validate(Plan.from_dict(mutated(data, random.Random(seed))), problem)
    except DivimlError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert str(report)
