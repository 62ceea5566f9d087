"""The commands: each takes the parsed arguments and returns what it prints (as JSON with --json)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from .. import solvers
from ..errors import InputError
from ..files import write_files_atomic
from ..frontends import neurips2020
from ..frontends.host import HOST_TYPE
from ..frontends.models import model_graph, names_a_model
from ..io import Input, load_input, problem_of, refuse_scenario_options
from ..plan import Plan
from ..platform import preset, preset_names
from ..problem import Objective, Problem
from ..reports import gantt
from ..simulate import pipeline_loads
from ..validate import validate

# the options read by one objective only: flag -> (argument, that objective)
OBJECTIVE_OPTIONS = {"--batch": ("batch", "batch"), "--training": ("training", "pipeline"),
                     "--contiguous/--no-contiguous": ("contiguous", "pipeline"), "--calls": ("calls", "call-latency")}


def check_objective_options(args, kind: str) -> None:
    """Refuse an option of :data:`OBJECTIVE_OPTIONS` (those a command has) given for another objective: it
    would be read by nothing (a --batch without --objective batch gave a latency plan without a word)."""
    for flag, (name, wanted) in OBJECTIVE_OPTIONS.items():
        if getattr(args, name, None) is not None and kind != wanted:
            raise InputError(f"{flag} applies to --objective {wanted}, not {kind}: add --objective {wanted}, or "
                             f"leave {flag} out")


def _problem(args, objective_kind: str | None = None) -> Problem:
    """The problem the command's arguments name; the lines saying which device types had their times derived
    are kept in ``args.derived`` (shown unless --quiet, and among a schedule's notes)."""
    args.derived = []
    kind = objective_kind or args.objective
    check_objective_options(args, kind)
    objective = Objective(kind, args.batch, args.training or "pipedream", bool(args.contiguous),
                          1 if args.calls is None else args.calls)
    if names_a_model(args.input):
        refuse_scenario_options(args.accelerators, args.cpus, args.memory, "a model")
        inp = Input(model_graph(args.input, refresh=getattr(args, "refresh", False),
                                progress=None if getattr(args, "quiet", True) else _progress), None, "model")
    else:
        inp = load_input(args.input, accelerators=args.accelerators, cpus=args.cpus, memory=args.memory)
    problem = problem_of(inp, platform=args.platform, objective=objective, say=args.derived.append)
    if kind == "batch":
        args.derived.extend(_priced_in_proportion(problem.graph))
    if not getattr(args, "quiet", True):
        for line in args.derived:
            _progress(line)
    idle = sorted(problem.platform.device_types - problem.graph.device_types)
    if idle:  # no task can run there: an error, or with --allow-idle a warning, never a silently idle device
        names = [d.name for d in problem.platform.devices if d.type in idle]
        missing = f"the graph has no times for device type(s) {', '.join(idle)} (devices {', '.join(names)})"
        if not getattr(args, "allow_idle", False):
            raise InputError(f"{missing} and none can be derived: profile the model for them, describe the type "
                             "under 'device_types' in the platform file (peak_flops, memory_bandwidth), or pass "
                             "--allow-idle to leave those devices idle")
        _progress(f"warning: {missing}, so nothing runs there (--allow-idle)")
    return problem


def _priced_in_proportion(graph) -> list[str]:
    """A note where no task has times at fewer samples than some size above 1: a batch plan's parts smaller
    than that are priced in proportion to it (graph.batch_table), which a task of small operators, whose time
    is mostly its cost per call, does not follow."""
    least = min((min([graph.batch_size, *t.time_by_batch.get(dt, {})]) for t in graph.tasks for dt in t.time),
                default=1)
    if least <= 1:
        return []
    return [f"parts of fewer than {least} samples are priced in proportion to the times at {least} (the graph "
            f"has none measured at fewer): profile at fewer samples too (diviml profile --batch "
            f"{graph.batch_size},1) for measured ones"]


def _check_folders(paths) -> None:
    """Refuse an output path whose folder does not exist, before any work is done."""
    for path in paths:
        if path and not Path(path).resolve().parent.is_dir():
            raise InputError(f"cannot write {path}: its folder does not exist")


def platform_text(path: str, platform) -> str:
    """``platform`` as the text of a file at ``path``: YAML for .yaml / .yml, JSON otherwise."""
    data = platform.to_dict()
    if Path(path).suffix in (".yaml", ".yml"):
        import yaml
        return yaml.safe_dump(data, sort_keys=False)
    return json.dumps(data, indent=1)


def _progress(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _process_start() -> float:
    """When this process started, on the :func:`time.monotonic` clock (Linux: from /proc, so the interpreter's
    start and the imports, 0.9 s before this module ran, count too); elsewhere, now."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: start time after boot, clock ticks
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.monotonic() - since_boot if 0.0 <= since_boot < 600.0 else time.monotonic()
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic()


PROCESS_STARTED = _process_start()  # run as the program, a command's time limit counts from here
MIN_SOLVER_SHARE = 0.1  # however long loading took, the solver gets this share of the limit
# seconds per task to write what a run asked for (measured on 50,000 tasks: the plan's JSON 0.3 s, a Gantt
# page or PNG 2.5 s), kept out of the solver's share so the command ends within its limit
WRITE_S_PER_TASK = {"json": 6e-6, "picture": 5e-5}


def solver_share(limit: float, tasks: int, started: float, *, json_outputs: int = 0, pictures: int = 0) -> float:
    """Seconds of the command's ``limit`` left for the solver: less what start-up and loading took since
    ``started`` (:func:`time.monotonic`; the process's start when run as the program) and what
    writing ``json_outputs`` files and drawing ``pictures`` of a ``tasks``-task plan will take; at least
    :data:`MIN_SOLVER_SHARE` of it.

    >>> 0.1 * 30 <= solver_share(30.0, 50_000, time.monotonic(), json_outputs=1, pictures=1) < 30.0 - 2.5
    True
    """
    writing = tasks * (json_outputs * WRITE_S_PER_TASK["json"] + pictures * WRITE_S_PER_TASK["picture"])
    return max(MIN_SOLVER_SHARE * limit, limit - (time.monotonic() - started) - writing)


def cmd_schedule(args) -> dict:
    if args.trace:  # the plan's timeline for chrome://tracing and Perfetto: a picture in its own format
        if not args.trace.lower().endswith(".json"):
            raise InputError(f"--trace {args.trace}: give a file ending in .json (Chrome trace event format)")
        args.gantt = [*(args.gantt or []), args.trace]
    options = {name: getattr(args, name) for name, o in solvers.OPTIONS.items()
               if o.cli and getattr(args, name) is not None}
    if args.solver != "auto":  # a mistaken request is refused before a large input is loaded
        solvers.check_request(args.objective, args.solver, args.time_limit)
        solvers.check_options(args.solver, options)
    for path in (args.gantt or []):
        gantt.check_format(path)
    _check_folders([args.out, args.split_out, *(args.gantt or [])])
    problem = _problem(args)
    args.solver, because = solvers.resolve(problem, args.solver)
    solvers.check_request(args.objective, args.solver, args.time_limit)
    solvers.check_options(args.solver, options)
    if args.split_out and not any(d.type == neurips2020.ACCELERATOR for d in problem.platform.devices):
        raise InputError("--split-out needs a NeurIPS 2020 scenario (accelerators and CPUs)")
    if not args.quiet:
        _progress(f"solving {problem.graph.name} ({len(problem.graph)} tasks) on {problem.platform.name} "
                  f"({len(problem.platform.devices)} devices), objective {problem.objective.kind}, "
                  f"solver {args.solver}" + (f" (auto: {because})" if because else "")
                  + f", time limit {args.time_limit:g} s")
    if not args.quiet:
        options["progress"] = _progress
    share = solver_share(args.time_limit, len(problem.graph), args.started, json_outputs=bool(args.out) + bool(args.split_out),
                         pictures=len(args.gantt or []))
    if not args.quiet and share < args.time_limit - 0.5:
        _progress(f"  the solver has {share:.3g} s of the {args.time_limit:g} s: {time.monotonic() - args.started:.3g} s went "
                  "to start-up and loading, the rest is kept for writing")
    plan = solvers.solve(problem, args.solver, time_limit=share, seed=args.seed, **options)
    # everything is rendered before anything is written: a failure leaves no partial set of outputs
    outputs: list[tuple[str, str | bytes]] = []
    if args.out:
        outputs.append((args.out, json.dumps(plan.to_dict(), indent=1)))
    for path in (args.gantt or []):
        outputs.append((path, gantt.render(plan, problem, path)))
    if args.split_out:
        loads = pipeline_loads(problem, plan.placement).total if plan.objective_kind == "pipeline" else None
        outputs.append((args.split_out, json.dumps(neurips2020.plan_to_split(plan, problem.platform, loads), indent=1)))
    write_files_atomic(outputs)
    out = plan.summary()
    out["notes"] = list(args.derived) + out["notes"]
    if because:
        out["chosen_because"] = because
    if problem.objective.kind == "batch":
        out["throughput"] = problem.batch_size / plan.objective if plan.objective > 0 else float("inf")
    out["written"] = [p for p in [args.out, args.split_out, *(args.gantt or [])] if p]
    return out


def cmd_evaluate(args) -> dict:
    if args.objective not in (None, "pipeline", "call-latency"):
        raise InputError("evaluate handles --objective pipeline (default) and call-latency")
    problem = _problem(args, args.objective or "pipeline")
    placement = neurips2020.load_split(args.split, problem.graph, problem.platform)
    if problem.objective.kind == "call-latency":
        from ..simulate import call_latency
        return {"objective": call_latency(problem, placement).makespan, "objective_kind": "call-latency",
                "time_unit": problem.graph.time_unit, "loads": {}}
    loads = pipeline_loads(problem, placement)
    return {"objective": loads.objective, "objective_kind": "pipeline", "time_unit": problem.graph.time_unit,
            "training": problem.objective.training if problem.is_training else None,
            "loads": loads.total, "forward_loads": loads.forward, "backward_loads": loads.backward}


def cmd_validate(args) -> dict:
    plan = Plan.load(args.plan)
    args.objective = plan.objective_kind
    if args.batch is None and plan.objective_kind == "batch":
        args.batch = plan.batch_size
    problem = _problem(args)
    report = validate(plan, problem)
    return {"valid": report.ok, "violations": list(report.violations), "objective": report.objective,
            "claimed_objective": plan.objective, "bound": plan.bound, "gap": plan.gap, "status": plan.status,
            "solver": plan.solver}


def cmd_profile(args) -> dict:
    from ..catalogue import CATALOGUE
    from ..frontends.pytorch import calibrate, default_table_sizes, measured_device_type, profile
    from ..runtime import model_source
    if (args.model is None) == (args.model_option is None):
        raise InputError("give the model once: a zoo name or path/to/file.py:factory (or --model)")
    batches = _batch_sizes(args.batch or "1")
    phased = args.phase or args.dtype or args.seq is not None or args.context is not None
    source = _phase_source(args, batches) if phased else model_source(args.model or args.model_option)
    also_at: tuple[int, ...] = ()
    if source.example_batch is not None:  # a factory: its own batch, and 1 for the tables, unless sizes are given
        if args.batch is None:
            batches, also_at = [source.example_batch], default_table_sizes(source.example_batch)
        for b in batches:
            source.inputs(b)  # inputs that hold no batch to resize: refused before any work
    if args.repeats < 1 or not args.min_time >= 0:
        raise InputError(f"--repeats must be >= 1 and --min-time >= 0 seconds, got {args.repeats} and {args.min_time}")
    _check_folders([args.out])
    threads, platform = args.threads, None
    if args.platform:
        from ..platform import Platform
        platform = Platform.load(args.platform)
        counts = {d.threads for d in platform.devices if d.is_host and d.threads}
        if len(counts) > 1:
            raise InputError(f"platform {args.platform!r} has CPU devices of different thread counts {sorted(counts)}: "
                             "profile once per count with --threads")
        if counts:
            if threads is not None and threads != next(iter(counts)):
                raise InputError(f"--threads {threads} contradicts platform {args.platform!r}, whose CPU devices "
                                 f"have {next(iter(counts))} thread(s): drop one of them")
            threads = next(iter(counts))
    threads = 1 if threads is None else threads
    device, *also_on = _measured_devices(args.device)
    measured = measured_device_type(device)
    types = [measured, *(measured_device_type(d) for d in also_on)]
    if len(set(types)) < len(types):
        raise InputError(f"--device {args.device}: two of these record times under one device type ({types}): "
                         "name each device once")
    progress = None if args.quiet else _progress
    graph = profile(source.build, source.inputs, name=source.name, batches=batches, measured_type=measured,
                    analytic_types=[t for t in CATALOGUE if t not in types], repeats=args.repeats, threads=threads,
                    min_time_s=args.min_time, progress=progress, device=device or "cpu",
                    fold_constants=not args.no_fold, also_on=also_on, also_at=also_at)
    if args.out:
        graph.save(args.out)
    times = {dt: sum(t.time.get(dt, 0.0) for t in graph.tasks) for dt in sorted(graph.device_types)}
    whole = [t.id for t in graph.tasks if t.whole_batch]
    calibration = None
    if measured in CATALOGUE:
        c = calibrate(graph, measured)
        calibration = {"device_type": measured, "scale": c.scale, "median_error_before": c.error_before,
                       "median_error_after": c.error_after, "tasks": c.tasks}
    return {"calibration": calibration, "model": source.name, "threads": threads, "tasks": len(graph), "edges": len(graph.edges), "batch_size": graph.batch_size,
            "flops": sum(t.flops or 0.0 for t in graph.tasks), "memory_bytes": sum(t.memory_bytes for t in graph.tasks),
            "total_time_s": times, "measured": measured, "measured_types": [t for t in types if t],
            "notes": _unmeasured_gpus(platform, [t for t in types if t and t != HOST_TYPE]) + _whole_batch(whole),
            "whole_batch": whole, "written": [args.out] if args.out else []}


def _whole_batch(names: list[str]) -> list[str]:
    """A note naming the tasks a batch plan must run whole (their result for a sample depends on others)."""
    if not names:
        return []
    return [f"{len(names)} task(s) mix the samples of a batch, so batch plans run them on the whole batch at once "
            f"(whole_batch): {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}"]


def _unmeasured_gpus(platform, measured_gpus: list[str]) -> list[str]:
    """Where GPUs were measured, a note for each GPU of the platform (if one is given) whose type was not: the
    graph gives it the catalogue's roofline, and plans for that platform are solved with it."""
    if platform is None or not measured_gpus:
        return []
    return [f"{d.name} is a {d.type} in platform {platform.name!r}, but the GPU measured here is a "
            f"{' and a '.join(measured_gpus)}: the graph gives {d.type} the catalogue's roofline; to plan with the "
            f"times measured here, give {d.name} the type {measured_gpus[0]}"
            for d in platform.devices if not d.is_host and d.type not in measured_gpus]


def _measured_devices(text: str) -> list:
    """--device: "none" (analytic only), or torch devices to measure on, comma-separated, the first the one the
    program is captured on ("cpu,cuda": this CPU and the GPU, each under its own device type)."""
    names = [d.strip() for d in text.split(",")]
    if names == ["none"]:
        return [None]
    if "none" in names or "" in names or len(set(names)) < len(names):
        raise InputError(f"--device {text!r}: give none alone, or devices to measure on like cpu or cpu,cuda, "
                         "each once")
    return names


def _batch_sizes(text: str) -> list[int]:
    """``--batch 1,8,32`` as sizes (InputError for anything else)."""
    try:
        batches = [int(b) for b in text.split(",")]
    except ValueError:
        raise InputError(f"--batch {text!r}: give batch sizes like 1,8,32") from None
    if any(b < 1 for b in batches):
        raise InputError("batch sizes must be >= 1")
    return batches


def _phase_source(args, batches: list[int]):
    """A language model in the serving phase and number type the flags choose (--phase, --seq, --context,
    --dtype)."""
    from ..frontends import zoo
    from ..runtime._source import ModelSource
    phase = args.phase or ("decode" if args.context is not None else "prefill")
    if (phase == "decode" and args.seq is not None) or (phase == "prefill" and args.context is not None):
        raise InputError("--seq sizes a prefill's prompt and --context a decoding step's cache: give the one "
                         "that fits --phase")
    if phase == "decode" and len(batches) > 1:
        raise InputError("a decoding step's KV cache is built for one batch size: give one --batch")
    spec = zoo.llm_spec(args.model or args.model_option, phase, sequence=args.seq,
                        context=2048 if args.context is None else args.context, batch=batches[0],
                        dtype=args.dtype or "fp32")
    return ModelSource(spec.name, spec.build, spec.inputs)


def cmd_models(args) -> dict:
    from ..frontends.zoo import MODELS
    return {"models": {name: spec.summary for name, spec in MODELS.items()}}


def cmd_platforms(args) -> dict:
    out = {}
    for name in preset_names():
        p = preset(name)
        out[name] = {"description": p.description,
                     "devices": [{"name": d.name, "type": d.type, "server": d.server,
                                  "memory_bytes": d.memory_bytes if d.memory_bytes != float("inf") else None,
                                  "handoff_s": d.handoff}
                                 for d in p.devices], "transfers": p.transfers, "sources": dict(p.sources)}
    return {"platforms": out}


def cmd_solvers(args) -> dict:
    return {"solvers": {s.name: {"objectives": list(s.objectives), "summary": s.summary,
                                 "options": [solvers.OPTIONS[o].flag for o in solvers.options_of(s.name)
                                             if solvers.OPTIONS[o].cli],
                                 "deterministic": s.deterministic}
                        for s in solvers.REGISTRY.values()}}
