"""diviml tune: schedule, run, calibrate from the run and schedule again until the plan stops changing; the
fastest plan measured is the answer (:func:`diviml.runtime.tune`)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError
from ..files import write_files_atomic
from ..io import DEFAULT_PLATFORM, load_input
from ..platform import Platform
from ..problem import Objective, Problem
from ._commands import _check_folders, _progress, check_objective_options, platform_text


def cmd_tune(args) -> dict:
    from ..runtime import model_source, tune
    _check_folders([args.out, args.graph_out, args.platform_out])
    if args.platform_out and Path(args.platform_out).suffix not in (".yaml", ".yml", ".json"):
        raise InputError(f"--platform-out {args.platform_out}: give a .yaml, .yml or .json file")
    if args.rounds < 1:
        raise InputError(f"--rounds must be >= 1, got {args.rounds}")
    platform = Platform.load(args.platform or DEFAULT_PLATFORM)
    check_objective_options(args, args.objective)
    objective = Objective(args.objective, args.batch)
    problem = Problem(load_input(args.graph).graph, platform, objective)
    report = tune(model_source(args.model), problem, solver=args.solver, time_limit=args.time_limit,
                  rounds=args.rounds, repeats=args.repeats, warmup=args.warmup,
                  progress=None if args.quiet else _progress)
    best = report.best_round
    outputs: list[tuple[str, str]] = []
    if args.out:
        outputs.append((args.out, json.dumps(best.plan.to_dict(), indent=1)))
    if args.graph_out:
        outputs.append((args.graph_out, json.dumps(best.graph.to_dict(), indent=1)))
    if args.platform_out:
        outputs.append((args.platform_out, platform_text(args.platform_out, best.platform)))
    write_files_atomic(outputs)
    return {**report.to_dict(), "solver": args.solver, "written": [p for p, _ in outputs]}
