"""The ``diviml`` command: a thin layer over the Python API.

Errors a user can fix become one line on stderr and exit status 2; no output file is written then.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path

from . import graph, solvers
from .errors import DivimlError, InputError
from .frontends import neurips2020
from .frontends.models import model_graph, names_a_model
from .frontends.pytorch import MIN_TIMING_S
from .graph import write_files_atomic
from .io import DEFAULT_PLATFORM, Input, load_input, problem_of
from .plan import Plan, format_gap
from .platform import preset, preset_names
from .problem import OBJECTIVES, Objective, Problem
from .reports import gantt
from .simulate import pipeline_loads
from .validate import validate


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        sys.stderr.write(f"diviml: error: {message} (see 'diviml --help')\n")
        raise SystemExit(2)


def _add_problem_options(p: argparse.ArgumentParser, default_objective: str | None = "latency") -> None:
    p.add_argument("input", help="diviml graph JSON, NeurIPS 2020 scenario file (auto-detected) or zoo model name")
    p.add_argument("--platform", help=f"preset ({', '.join(preset_names())}) or YAML/JSON file; "
                   "default: the scenario's own machine, else paper-server")
    p.add_argument("--objective", choices=OBJECTIVES, default=default_objective)
    p.add_argument("--batch", type=int, help="requests per batch for --objective batch (default 8)")
    p.add_argument("--training", choices=("pipedream", "gpipe"), default="pipedream",
                   help="training objective for pipelines of training graphs")
    p.add_argument("--contiguous", action=argparse.BooleanOptionalAction, default=False,
                   help="pipeline: every device holds a convex node set")
    p.add_argument("--calls", type=int, default=1,
                   help="call-latency: calls (contiguous subgraphs) per accelerator, q (default 1)")
    p.add_argument("--accelerators", type=int, help="NeurIPS scenario: override k")
    p.add_argument("--cpus", type=int, help="NeurIPS scenario: override l")
    p.add_argument("--memory", type=float, help="NeurIPS scenario: override bytes per accelerator")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--refresh", action="store_true",
                   help="a zoo model name: profile it again instead of reading the cached profile")
    p.add_argument("--allow-idle", action="store_true",
                   help="a platform device type the graph has no times for (and none can be derived) is a warning, "
                        "and the device stays idle, instead of an error")


def _problem(args, objective_kind: str | None = None) -> Problem:
    """The problem the command's arguments name; the lines saying which device types had their times derived
    are kept in ``args.derived`` (shown unless --quiet, and among a schedule's notes)."""
    args.derived = []
    kind = objective_kind or args.objective
    objective = Objective(kind, args.batch, args.training, args.contiguous, args.calls)
    if names_a_model(args.input):
        inp = Input(model_graph(args.input, refresh=getattr(args, "refresh", False),
                                progress=None if getattr(args, "quiet", True) else _progress), None, "model")
    else:
        inp = load_input(args.input, accelerators=args.accelerators, cpus=args.cpus, memory=args.memory)
    problem = problem_of(inp, platform=args.platform, objective=objective, say=args.derived.append)
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


def _progress(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


STARTED = time.monotonic()  # the command's time limit counts from here: start-up and loading are in it
MIN_SOLVER_SHARE = 0.1  # however long loading took, the solver gets this share of the limit
# seconds per task to write what a run asked for (measured on 50,000 tasks: the plan's JSON 0.3 s, a Gantt
# page or PNG 2.5 s), kept out of the solver's share so the command ends within its limit
WRITE_S_PER_TASK = {"json": 6e-6, "picture": 5e-5}


def solver_share(limit: float, tasks: int, *, json_outputs: int = 0, pictures: int = 0) -> float:
    """Seconds of the command's ``limit`` left for the solver: less what start-up and loading took and what
    writing ``json_outputs`` files and drawing ``pictures`` of a ``tasks``-task plan will take; at least
    :data:`MIN_SOLVER_SHARE` of it.

    >>> 0.1 * 30 <= solver_share(30.0, 50_000, json_outputs=1, pictures=1) < 30.0 - 2.5
    True
    """
    writing = tasks * (json_outputs * WRITE_S_PER_TASK["json"] + pictures * WRITE_S_PER_TASK["picture"])
    return max(MIN_SOLVER_SHARE * limit, limit - (time.monotonic() - STARTED) - writing)


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
    for path in [args.out, args.split_out, *(args.gantt or [])]:
        if path and not Path(path).resolve().parent.is_dir():
            raise InputError(f"cannot write {path}: its folder does not exist")
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
    share = solver_share(args.time_limit, len(problem.graph), json_outputs=bool(args.out) + bool(args.split_out),
                         pictures=len(args.gantt or []))
    if not args.quiet and share < args.time_limit - 0.5:
        _progress(f"  the solver has {share:.3g} s of the {args.time_limit:g} s: {time.monotonic() - STARTED:.3g} s went "
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
        from .simulate import call_latency
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
    from .catalogue import CATALOGUE
    from .frontends.pytorch import calibrate, measured_device_type, profile
    from .runtime import model_source
    if (args.model is None) == (args.model_option is None):
        raise InputError("give the model once: a zoo name or path/to/file.py:factory (or --model)")
    source = model_source(args.model or args.model_option)
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        raise InputError(f"--batch {args.batch!r}: give batch sizes like 1,8,32") from None
    if any(b < 1 for b in batches):
        raise InputError("batch sizes must be >= 1")
    if source.batch_fixed is not None and batches != [source.batch_fixed]:
        if args.batch != "1":
            raise InputError(f"the factory's inputs have batch {source.batch_fixed}: a factory model is profiled at "
                             "that batch only (drop --batch)")
        batches = [source.batch_fixed]
    if args.repeats < 1 or not args.min_time >= 0:
        raise InputError(f"--repeats must be >= 1 and --min-time >= 0 seconds, got {args.repeats} and {args.min_time}")
    if args.out and not Path(args.out).resolve().parent.is_dir():
        raise InputError(f"cannot write {args.out}: its folder does not exist")
    threads = args.threads
    if args.platform:
        from .platform import Platform
        counts = {d.threads for d in Platform.load(args.platform).devices if d.is_host and d.threads}
        if len(counts) > 1:
            raise InputError(f"platform {args.platform!r} has CPU devices of different thread counts {sorted(counts)}: "
                             "profile once per count with --threads")
        if counts:
            if threads is not None and threads != next(iter(counts)):
                raise InputError(f"--threads {threads} contradicts platform {args.platform!r}, whose CPU devices "
                                 f"have {next(iter(counts))} thread(s): drop one of them")
            threads = next(iter(counts))
    threads = 1 if threads is None else threads
    device = None if args.device == "none" else args.device
    measured = measured_device_type(device)
    progress = None if args.quiet else _progress
    graph = profile(source.build, source.inputs, name=source.name, batches=batches, measured_type=measured,
                    analytic_types=[t for t in CATALOGUE if t != measured], repeats=args.repeats, threads=threads,
                    min_time_s=args.min_time, progress=progress, device=device or "cpu",
                    fold_constants=not args.no_fold)
    if args.out:
        graph.save(args.out)
    times = {dt: sum(t.time.get(dt, 0.0) for t in graph.tasks) for dt in sorted(graph.device_types)}
    calibration = None
    if measured in CATALOGUE:
        c = calibrate(graph, measured)
        calibration = {"device_type": measured, "scale": c.scale, "median_error_before": c.error_before,
                       "median_error_after": c.error_after, "tasks": c.tasks}
    return {"calibration": calibration, "model": source.name, "threads": threads, "tasks": len(graph), "edges": len(graph.edges), "batch_size": graph.batch_size,
            "flops": sum(t.flops or 0.0 for t in graph.tasks), "memory_bytes": sum(t.memory_bytes for t in graph.tasks),
            "total_time_s": times, "measured": measured, "written": [args.out] if args.out else []}


def cmd_run(args) -> dict:
    from .platform import Platform
    from .runtime import launch, model_source, run
    from .runtime._dist import env_world
    for path in [args.trace, args.calibrate_out, args.calibrate_platform_out, *(args.gantt or [])]:
        if path and not Path(path).resolve().parent.is_dir():
            raise InputError(f"cannot write {path}: its folder does not exist")
    for path in (args.gantt or []):
        gantt.check_format(path)
    if args.nproc is not None:
        if args.nproc < 1:
            raise InputError(f"--nproc must be >= 1, got {args.nproc}")
        if "RANK" in os.environ:
            raise InputError("--nproc starts the ranks itself: do not combine it with torchrun")
        from .runtime import rank_of_devices
        rank_of_devices(Platform.load(args.platform or DEFAULT_PLATFORM), args.nproc)  # refuse a wrong size here
        text = launch(_without_option(args.argv, "--nproc"), args.nproc)
        return {"_text": text}
    if args.calibrate_out and not args.graph:
        raise InputError("--calibrate-out needs --graph (the profiled graph the plan was made from)")
    if args.model_option is not None:  # 'run --model M PLAN': the one positional is the plan
        args.model, args.plan = args.model_option, args.plan or args.model
    if args.model is None or args.plan is None:
        raise InputError("give the model and the plan: diviml run MODEL PLAN (or --model MODEL PLAN)")
    rank, world = env_world()
    platform = Platform.load(args.platform or DEFAULT_PLATFORM)
    plan = Plan.load(args.plan)
    source = model_source(args.model)
    problem = None
    if args.graph:
        graph = load_input(args.graph).graph
        objective = Objective(plan.objective_kind if plan.objective_kind in ("latency", "batch") else "latency",
                              plan.batch_size if plan.objective_kind == "batch" else None)
        problem = Problem(graph, platform, objective)
    report = run(source, plan, platform, problem=problem, batch=args.batch, repeats=args.repeats,
                 warmup=args.warmup, rank=rank, world=world, progress=None if args.quiet else _progress)
    outputs: list[tuple[str, str | bytes]] = []
    if rank == 0:
        from .reports import measured
        from .runtime import calibrated_graph, calibrated_platform
        if args.trace:
            outputs.append((args.trace, json.dumps(measured.chrome_trace(report))))
        for path in (args.gantt or []):
            outputs.append((path, measured.render_gantt(report, path)))
        wanted = args.calibrate_out or args.calibrate_platform_out
        calibrated = calibrated_graph(report, plan, problem) if wanted and problem is not None else None
        if args.calibrate_out:
            outputs.append((args.calibrate_out, json.dumps(calibrated.to_dict(), indent=1)))
        if args.calibrate_platform_out:
            on_graph = Problem(calibrated, platform, problem.objective) if calibrated is not None else None
            data = calibrated_platform(report, platform, plan=plan, problem=on_graph).to_dict()
            import yaml
            text = (yaml.safe_dump(data, sort_keys=False) if Path(args.calibrate_platform_out).suffix in (".yaml", ".yml")
                    else json.dumps(data, indent=1))
            outputs.append((args.calibrate_platform_out, text))
    write_files_atomic(outputs)
    if rank != 0:  # rank 0 speaks for the run
        return {"_text": ""}
    return {**report.to_dict(), "written": [p for p, _ in outputs]}


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


def cmd_models(args) -> dict:
    from .frontends.zoo import MODELS
    return {"models": {name: spec.summary for name, spec in MODELS.items()}}


def cmd_platforms(args) -> dict:
    out = {}
    for name in preset_names():
        p = preset(name)
        out[name] = {"description": p.description,
                     "devices": [{"name": d.name, "type": d.type, "server": d.server,
                                  "memory_bytes": d.memory_bytes if d.memory_bytes != float("inf") else None}
                                 for d in p.devices], "sources": dict(p.sources)}
    return {"platforms": out}


def cmd_solvers(args) -> dict:
    return {"solvers": {s.name: {"objectives": list(s.objectives), "summary": s.summary,
                                 "options": [solvers.OPTIONS[o].flag for o in solvers.options_of(s.name)
                                             if solvers.OPTIONS[o].cli],
                                 "deterministic": s.deterministic}
                        for s in solvers.REGISTRY.values()}}


def _print_human(command: str, out: dict) -> None:
    if command == "platforms":
        for name, p in out["platforms"].items():
            print(f"{name}: {p['description']}")
            for d in p["devices"]:
                mem = "unlimited" if d["memory_bytes"] is None else f"{d['memory_bytes']:.3g} B"
                print(f"    {d['name']:<10} {d['type']:<12} {mem:<12} {d['server']}")
        return
    if command == "solvers":
        for name, s in out["solvers"].items():
            print(f"{name:<12} [{', '.join(s['objectives'])}] {s['summary']}")
            if s["options"]:
                print(f"{'':<12} options: {' '.join(s['options'])}")
        return
    if command == "validate":
        print("valid" if out["valid"] else "INVALID")
        for v in out["violations"]:
            print(f"  - {v}")
        print(f"objective {out['objective']} (claimed {out['claimed_objective']}), bound {out['bound']}")
        return
    if command == "models":
        for name, summary in out["models"].items():
            print(f"{name:<20} {summary}")
        return
    if command == "profile":
        print(f"{out['model']}: {out['tasks']} tasks, {out['edges']} edges, batch {out['batch_size']}, "
              f"{out['flops'] / 1e9:.3g} GFLOP, {out['memory_bytes'] / 1e6:.4g} MB of weights")
        width = max(map(len, out["total_time_s"]), default=0)
        for dt, t in out["total_time_s"].items():
            how = ("measured" if dt == out["measured"] else
                   "derived from host" if dt == "cpu" and out["measured"] == "host" else "roofline")
            print(f"  {dt:<{width}}  {t * 1e3:>10.4g} ms  ({how})")
        c = out["calibration"]
        if c:
            print(f"  roofline vs measured on {c['device_type']}: median operator error {100 * c['median_error_before']:.0f}%, "
                  f"{100 * c['median_error_after']:.0f}% after scaling by {c['scale']:.3g}")
        for p in out["written"]:
            print(f"wrote {p}")
        return
    if command == "run":
        print(f"{out['model']} batch {out['batch_size']} on {len(out['devices'])} device(s), {out['pieces']} "
              f"pieces, {out['world_size']} rank(s): measured {out['measured_s'] * 1e3:.4g} ms (median of "
              f"{out['repeats']}, {out['measured_min_s'] * 1e3:.4g}-{out['measured_max_s'] * 1e3:.4g}), predicted "
              f"{out['predicted_s'] * 1e3:.4g} ms, ratio {out['ratio']:.3f}; outputs match the unsplit module "
              f"(largest difference {out['max_abs_error']:.3g}); unsplit module here {out['eager_s'] * 1e3:.4g} ms")
        for n in out["notes"]:
            print(f"  note: {n}")
        for p in out["written"]:
            print(f"wrote {p}")
        return
    if command == "evaluate":
        for d, load in out["loads"].items():
            print(f"  {d:<8} load {load:.6g}")
        label = "max-load" if out["objective_kind"] == "pipeline" else "latency"
        print(f"{label} {out['objective']:.6g} {out['time_unit']}")
        return
    unit = out["time_unit"]
    source = f" ({out['bound_source']})" if out.get("bound_source") else ""
    print(f"{out['objective_kind']} {out['objective']:.6g} {unit}  bound {out['bound']:.6g}{source}  gap "
          f"{format_gap(out['gap'])}  status {out['status']}  solver {out['solver']}  "
          f"({out['solve_time_s']:.2f} s)")
    if "throughput" in out:
        print(f"throughput {out['throughput']:.6g} samples per {unit}")
    for n in out["notes"]:
        print(f"  note: {n}")
    for p in out["written"]:
        print(f"wrote {p}")


def _add_solver_options(parser) -> None:
    """A flag per solver option (:data:`diviml.solvers.OPTIONS`), saying which solvers take it."""
    for name, option in solvers.OPTIONS.items():
        if not option.cli:
            continue
        takers = [s for s in solvers.REGISTRY if name in solvers.options_of(s)]
        by_default: dict = {}
        for s in takers:
            if solvers.options_of(s)[name] is not None and option.type is not bool:
                by_default.setdefault(solvers.options_of(s)[name], []).append(s)
        default = ("; default " + ", ".join(f"{v}" + (f" ({', '.join(who)})" if len(by_default) > 1 else "")
                                            for v, who in by_default.items())) if by_default else ""
        text = f"{option.help} (solvers: {', '.join(takers)}{default})"
        if option.type is bool:
            parser.add_argument(option.flag, dest=name, action="store_const", const=False, help=text)
        else:
            parser.add_argument(option.flag, dest=name, type=option.type, choices=option.choices, help=text)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="diviml", description="Map DNNs onto heterogeneous hardware with proven bounds.")
    from . import __version__
    parser.add_argument("--version", action="version", version=f"diviml {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser("schedule", help="place and schedule a graph")
    _add_problem_options(s)
    s.add_argument("--solver", default="auto",
                   help="see 'diviml solvers'; auto (default): chosen by the problem (exact for small graphs, "
                        "split for large ones, ip for pipeline, call-exact for call-latency) and said why")
    s.add_argument("--time-limit", type=float, default=60.0, help="seconds (default 60)")
    s.add_argument("--seed", type=int, default=0)
    _add_solver_options(s)
    s.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    s.add_argument("--out", help="write the plan as JSON")
    s.add_argument("--gantt", action="append",
                   help="draw the plan (.png, .svg, .html, or .json: a Chrome trace); repeatable")
    s.add_argument("--trace", help="write the plan's timeline as Chrome trace JSON (chrome://tracing, Perfetto)")
    s.add_argument("--split-out", help="write the plan in the NeurIPS 2020 split format")
    r = sub.add_parser("run", help="run a plan on this machine's devices: outputs checked, time measured")
    r.add_argument("model", nargs="?", help="a zoo name (see 'diviml models') or path/to/file.py:factory, a function "
                                 "returning (module, example_inputs)")
    r.add_argument("plan", nargs="?", help="plan JSON written by 'diviml schedule --out' (latency or batch)")
    r.add_argument("--model", dest="model_option", help="the model, instead of the positional MODEL")
    r.add_argument("--platform", help="the platform the plan was scheduled for (default paper-server)")
    r.add_argument("--graph", help="the profiled graph the plan was made from: per-piece predictions, "
                                   "--calibrate-out and the predicted side of --gantt")
    r.add_argument("--batch", type=int, help="batch size to run (default: the plan's)")
    r.add_argument("--repeats", type=int, default=10, help="timed runs after the warm-up (default 10)")
    r.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    r.add_argument("--nproc", type=int, help="run as N torch.distributed (gloo) ranks on this host: one per "
                                             "server of the platform, or one per device")
    r.add_argument("--trace", help="write the measured per-piece timeline as Chrome trace JSON")
    r.add_argument("--gantt", action="append", help="draw measured beside predicted (.png, .svg or .html)")
    r.add_argument("--calibrate-out", help="write the graph with times scaled to what the pieces measured")
    r.add_argument("--calibrate-platform-out",
                   help="write the platform (.yaml or .json) with the hand-offs measured between devices as links "
                        "(with --graph: their latency fitted so that the plan re-timed takes what was measured)")
    r.add_argument("--quiet", action="store_true")
    r.add_argument("--json", action="store_true")
    e = sub.add_parser("evaluate", help="max-load of a NeurIPS 2020 split")
    _add_problem_options(e, default_objective=None)
    e.add_argument("--split", required=True, help="split JSON ({'fpgas': [...], 'cpus': [...]})")
    v = sub.add_parser("validate", help="check a plan against its problem")
    _add_problem_options(v, default_objective=None)
    v.add_argument("plan", help="plan JSON written by 'diviml schedule --out'")
    pr = sub.add_parser("profile", help="capture and cost a zoo model into a diviml graph")
    pr.add_argument("model", nargs="?", help="a name from 'diviml models', or path/to/file.py:factory (a function "
                                             "returning (module, example_inputs))")
    pr.add_argument("--model", dest="model_option", help="the same as the positional MODEL")
    pr.add_argument("--platform", help="profile CPU times with the thread count of this platform's CPU devices "
                                       "(e.g. cpu-workers-2: one thread)")
    pr.add_argument("--batch", default="1", help="batch sizes, comma-separated; the first is the graph's (default 1)")
    pr.add_argument("--device", default="cpu",
                    help="where to measure: cpu, cuda or cuda:N (times recorded under the catalogue's name for "
                         "that GPU, e.g. h100-sxm), or none (analytic costs only, weights never allocated)")
    pr.add_argument("--repeats", type=int, default=5, help="timed runs per operator at least (median kept)")
    pr.add_argument("--min-time", type=float, default=MIN_TIMING_S,
                    help=f"seconds of timing per batch size at least, passes spread over them (default {MIN_TIMING_S:g})")
    pr.add_argument("--no-fold", action="store_true",
                    help="charge what depends on no input per request (by default it is computed once at capture)")
    pr.add_argument("--threads", type=int, help="CPU threads while measuring (fixed; default 1, or the platform's)")
    pr.add_argument("--out", help="write the graph JSON")
    pr.add_argument("--quiet", action="store_true")
    pr.add_argument("--json", action="store_true")
    mo = sub.add_parser("models", help="list the model zoo")
    mo.add_argument("--json", action="store_true")
    p = sub.add_parser("platforms", help="list the platform presets")
    p.add_argument("--json", action="store_true")
    so = sub.add_parser("solvers", help="list the solvers")
    so.add_argument("--json", action="store_true")
    return parser


COMMANDS = {"schedule": cmd_schedule, "evaluate": cmd_evaluate, "validate": cmd_validate, "profile": cmd_profile,
            "run": cmd_run,
            "models": cmd_models,
            "platforms": cmd_platforms, "solvers": cmd_solvers}


def _children() -> set[int]:
    """This process's child processes: the solvers' worker pools and the ranks of 'run --nproc'."""
    pids = {p.pid for p in multiprocessing.active_children()}
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):  # Linux: children not started by multiprocessing too
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[1] == me:
                pids.add(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return pids


def _exit_on_signal() -> None:
    """SIGINT and SIGTERM end the run at once, even while a solver is inside native code (an LP, CP-SAT):
    whichever thread the signal lands on, the interpreter's C-level handler writes its number to a pipe (the
    wakeup fd) and a thread of its own, blocked on that pipe, kills every worker process, removes
    temporaries being written, lets outputs being renamed finish all together (so old files are either all
    kept or all replaced), says so in one line and exits 130 or 143."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: None)  # the thread below acts; the main thread just carries on
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)

    def wait() -> None:
        number = os.read(read, 1)[0]
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        whole = graph.RENAMING.acquire(timeout=1.5)
        for tmp in list(graph.STAGING):
            Path(tmp).unlink(missing_ok=True)
        files = "no output is half-written" if whole else "outputs may be incomplete"
        sys.stderr.write(f"diviml: interrupted ({signal.Signals(number).name}); worker processes stopped, "
                         f"{files}\n")
        sys.stderr.flush()
        os._exit(128 + number)
    threading.Thread(target=wait, name="diviml-signals", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if argv is None and threading.current_thread() is threading.main_thread():  # run as the program
        _exit_on_signal()
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        out = COMMANDS[args.command](args)
    except DivimlError as exc:
        sys.stderr.write(f"diviml: error: {str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("diviml: interrupted\n")
        return 130
    try:
        if "_text" in out:  # another process's output (the ranks of 'run --nproc'), passed through
            sys.stdout.write(out["_text"])
        elif args.json:
            print(json.dumps(out, allow_nan=False, default=str))
        else:
            _print_human(args.command, out)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped early (| head): what it read stands, no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if args.command == "validate" and not out["valid"]:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
