"""Reading an input file (diviml graph JSON or NeurIPS 2020 scenario, auto-detected) into a Problem; reading
never profiles (a model named instead of a file: :mod:`diviml.frontends.models`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import InputError, in_file
from .files import read_json
from .frontends import neurips2020
from .frontends.derive import complete_for
from .frontends.models import not_a_model_hint
from .graph import TaskGraph
from .platform import Platform
from .problem import Objective, Problem

DEFAULT_PLATFORM = "paper-server"


@dataclass(frozen=True)
class Input:
    graph: TaskGraph
    platform: Platform | None  # the scenario's own machine, when the file brings one
    format: str  # "diviml", "neurips2020" or "model"


def refuse_scenario_options(accelerators: int | None, cpus: int | None, memory: float | None, what: str) -> None:
    """The NeurIPS 2020 scenario's overrides (k, l, memory) given for ``what`` else: an InputError."""
    if any(x is not None for x in (accelerators, cpus, memory)):
        raise InputError(f"--accelerators/--cpus/--memory apply to NeurIPS 2020 scenarios only; give a --platform "
                         f"file for {what}")


def load_input(path: str | Path, *, accelerators: int | None = None, cpus: int | None = None,
               memory: float | None = None) -> Input:
    """A diviml graph file or a NeurIPS 2020 scenario (a named model is profiled by
    :func:`diviml.frontends.models.model_graph`, never here)."""
    if not Path(path).exists():
        raise InputError(f"{path}: no such file{not_a_model_hint(str(path))}")
    data = read_json(path)
    if neurips2020.is_scenario(data):
        with in_file(path):
            graph = neurips2020.graph_from_scenario(data, Path(path).stem)
            platform = neurips2020.platform_from_scenario(data, accelerators=accelerators, cpus=cpus, memory=memory)
        return Input(graph, platform, "neurips2020")
    if isinstance(data, dict) and ("tasks" in data or "schema" in data):
        refuse_scenario_options(accelerators, cpus, memory, "a diviml graph")
        with in_file(path):
            return Input(TaskGraph.from_dict(data), None, "diviml")
    raise InputError(f"{path}: neither a diviml graph (with 'tasks' and 'edges') nor a NeurIPS 2020 scenario "
                     "(with 'maxFPGAs' and 'nodes')")


def load_problem(path: str | Path, *, platform: str | Platform | None = None, objective: Objective | None = None,
                 say=None, **overrides) -> Problem:
    """Problem from a graph file or scenario (:func:`load_input`); ``platform`` overrides a scenario's own."""
    return problem_of(load_input(path, **overrides), platform=platform, objective=objective, say=say)


def problem_of(inp: Input, *, platform: str | Platform | None = None, objective: Objective | None = None,
               say=None) -> Problem:
    """The Problem of an input on ``platform`` (default: the input's own machine, else paper-server). A device
    type of the platform the graph has no times for gets times derived from a type it has
    (:func:`.frontends.derive.complete_for`; ``say``, a callable taking a line, is told which)."""
    if isinstance(platform, Platform):
        plat = platform
    elif platform is not None:
        plat = Platform.load(platform)
    else:
        plat = inp.platform or Platform.load(DEFAULT_PLATFORM)
    graph, derived = complete_for(inp.graph, plat)
    for line in derived if say else ():
        say(line)
    return Problem(graph, plat, objective or Objective())
