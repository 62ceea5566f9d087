"""diviml run: a plan run on this machine's devices, its outputs checked and its time measured beside the
prediction (:func:`diviml.runtime.run`); on several ranks, launched here (``--nproc``)."""

from __future__ import annotations

import json
import os

from .. import solvers
from ..errors import InputError
from ..files import write_files_atomic
from ..io import DEFAULT_PLATFORM, load_input
from ..plan import Plan
from ..problem import Objective, Problem
from ..reports import gantt
from ._commands import _check_folders, _progress, platform_text


def _check_run_args(args) -> None:
    """Refuse a run request that cannot be met before anything is captured or launched."""
    _check_folders([args.trace, args.calibrate_out, args.calibrate_platform_out, *(args.gantt or [])])
    for path in (args.gantt or []):
        gantt.check_format(path)
    if args.nproc is not None and args.nproc < 1:
        raise InputError(f"--nproc must be >= 1, got {args.nproc}")
    if args.nproc is not None and "RANK" in os.environ:
        raise InputError("--nproc starts the ranks itself: do not combine it with torchrun")
    for option, given in (("--calibrate-out", args.calibrate_out), ("--compare", args.compare)):
        if given and not args.graph:
            raise InputError(f"{option} needs --graph (the profiled graph the plan was made from)")
    if args.compare and (args.nproc is not None or "RANK" in os.environ):
        raise InputError("--compare runs in one process: give it without --nproc or torchrun")


def cmd_run(args) -> dict:
    from ..platform import Platform
    from ..runtime import launch, model_source, run, run_beside
    from ..runtime._calibrate import STREAM_NOT_CALIBRATED
    from ..runtime._dist import env_world
    _check_run_args(args)
    if args.nproc is not None:
        from ..runtime import rank_of_devices
        rank_of_devices(Platform.load(args.platform or DEFAULT_PLATFORM), args.nproc)  # refuse a wrong size here
        text = launch(_without_option(args.argv, "--nproc"), args.nproc)
        return {"_text": text}
    if args.model_option is not None:  # 'run --model M PLAN': the one positional is the plan
        args.model, args.plan = args.model_option, args.plan or args.model
    if args.model is None or args.plan is None:
        raise InputError("give the model and the plan: diviml run MODEL PLAN (or --model MODEL PLAN)")
    rank, world = env_world()
    platform = Platform.load(args.platform or DEFAULT_PLATFORM)
    plan = Plan.load(args.plan)
    if plan.objective_kind == "pipeline" and (args.calibrate_out or args.calibrate_platform_out):
        raise InputError(STREAM_NOT_CALIBRATED)  # before the run, not after it
    source = model_source(args.model)
    problem = None
    if args.graph:
        graph = load_input(args.graph).graph
        objective = Objective(plan.objective_kind if plan.objective_kind in ("latency", "batch", "pipeline")
                              else "latency", plan.batch_size if plan.objective_kind == "batch" else None)
        problem = Problem(graph, platform, objective)
    progress = None if args.quiet else _progress
    single = None
    if args.compare and problem is not None:  # both plans in this process, their runs in turn
        single = solvers.solve(problem, "best-device", time_limit=60)
        report, single_report = run_beside(source, (plan, single), platform, problem=problem, batch=args.batch,
                                           repeats=args.repeats, warmup=args.warmup, progress=progress,
                                           requests=args.requests)
    else:
        report = run(source, plan, platform, problem=problem, batch=args.batch, repeats=args.repeats,
                     warmup=args.warmup, rank=rank, world=world, progress=progress, requests=args.requests)
    outputs: list[tuple[str, str | bytes]] = []
    if rank == 0:
        from ..reports import measured
        from ..runtime import calibrated_graph, calibrated_platform
        if args.trace:
            outputs.append((args.trace, json.dumps(measured.chrome_trace(report))))
        for path in (args.gantt or []):
            outputs.append((path, measured.render_gantt(report, path)))
        wanted = args.calibrate_out or args.calibrate_platform_out
        calibrated = calibrated_graph(report, plan, problem) if wanted and problem is not None else None
        if args.calibrate_out and calibrated is not None:  # --calibrate-out needs --graph (checked above)
            outputs.append((args.calibrate_out, json.dumps(calibrated.to_dict(), indent=1)))
        if args.calibrate_platform_out:
            on_graph = Problem(calibrated, platform, problem.objective) if calibrated is not None and problem else None
            outputs.append((args.calibrate_platform_out, platform_text(
                args.calibrate_platform_out, calibrated_platform(report, platform, plan=plan, problem=on_graph))))
    compared = ({"single_device": single.assignments[0].device, "single_predicted_s": single_report.predicted_s,
                 "single_measured_s": single_report.measured_s, "single_outputs_match": single_report.outputs_match,
                 "speedup": single_report.measured_s / report.measured_s} if single is not None else {})
    write_files_atomic(outputs)
    if rank != 0:  # rank 0 speaks for the run
        return {"_text": ""}
    return {**report.to_dict(), **compared, "written": [p for p, _ in outputs]}


def _without_option(argv: list[str], option: str) -> list[str]:
    """``argv`` less ``option VALUE`` / ``option=VALUE``."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == option:
            skip = True
        elif not a.startswith(option + "="):
            out.append(a)
    return out
