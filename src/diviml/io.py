"""Reading an INPUT (diviml graph JSON or NeurIPS 2020 scenario, auto-detected) into a Problem."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import InputError
from .frontends import neurips2020
from .graph import TaskGraph, read_json
from .platform import Platform
from .problem import Objective, Problem

DEFAULT_PLATFORM = "paper-server"


@dataclass(frozen=True)
class Input:
    graph: TaskGraph
    platform: Platform | None  # the scenario's own machine, when the file brings one
    format: str  # "diviml" or "neurips2020"


def load_input(path: str | Path, *, accelerators: int | None = None, cpus: int | None = None,
               memory: float | None = None, progress=None) -> Input:
    """A graph file, a NeurIPS scenario, or a model zoo name (profiled on this CPU, batch 1)."""
    if not Path(path).exists():
        from . import zoo
        if str(path) in zoo.MODELS:
            from .frontends.pytorch import profile_zoo
            return Input(profile_zoo(str(path), repeats=3, progress=progress), None, "model")
        import difflib
        close = difflib.get_close_matches(str(path), list(zoo.MODELS), n=3, cutoff=0.6)
        if close or not Path(path).suffix:  # reads like a model name, not a file name
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise InputError(f"{path}: no such file, and no zoo model of that name; {hint}'diviml models' lists "
                             "the models")
    data = read_json(path)
    if neurips2020.is_scenario(data):
        graph = neurips2020.graph_from_scenario(data, Path(path).stem)
        platform = neurips2020.platform_from_scenario(data, accelerators=accelerators, cpus=cpus, memory=memory)
        return Input(graph, platform, "neurips2020")
    if isinstance(data, dict) and ("tasks" in data or "schema" in data):
        if any(x is not None for x in (accelerators, cpus, memory)):
            raise InputError("--accelerators/--cpus/--memory apply to NeurIPS 2020 scenarios only; "
                             "give a --platform file for a diviml graph")
        return Input(TaskGraph.from_dict(data), None, "diviml")
    raise InputError(f"{path}: neither a diviml graph (with 'tasks' and 'edges') nor a NeurIPS 2020 scenario "
                     "(with 'maxFPGAs' and 'nodes')")


def load_problem(path: str | Path, *, platform: str | Platform | None = None, objective: Objective | None = None,
                 **overrides) -> Problem:
    """Problem from an INPUT (graph file, scenario or zoo model name); ``platform`` overrides a scenario's own."""
    inp = load_input(path, **overrides)
    if isinstance(platform, Platform):
        plat = platform
    elif platform is not None:
        plat = Platform.load(platform)
    else:
        plat = inp.platform or Platform.load(DEFAULT_PLATFORM)
    return Problem(inp.graph, plat, objective or Objective())
