"""The command line: every command's arguments, solver flags built from the option map."""

from __future__ import annotations

import argparse
import sys

from .. import solvers
from ..frontends.pytorch import MIN_TIMING_S
from ..platform import preset_names
from ..problem import OBJECTIVES


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
    # these four apply to one objective each (cli._commands.OBJECTIVE_OPTIONS): given for another, refused
    p.add_argument("--training", choices=("pipedream", "gpipe"),
                   help="pipeline: the training objective for pipelines of training graphs (default pipedream)")
    p.add_argument("--contiguous", action=argparse.BooleanOptionalAction,
                   help="pipeline: stages that run in one order (every device holds a convex node set, and no two devices pass tensors both ways)")
    p.add_argument("--calls", type=int,
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
    from .. import __version__
    parser.add_argument("--version", action="version", version=f"diviml {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_schedule(sub)
    _add_run(sub)
    _add_tune(sub)
    e = sub.add_parser("evaluate", help="max-load of a NeurIPS 2020 split")
    _add_problem_options(e, default_objective=None)
    e.add_argument("--split", required=True, help="split JSON ({'fpgas': [...], 'cpus': [...]})")
    v = sub.add_parser("validate", help="check a plan against its problem")
    _add_problem_options(v, default_objective=None)
    v.add_argument("plan", help="plan JSON written by 'diviml schedule --out'")
    _add_profile(sub)
    mo = sub.add_parser("models", help="list the model zoo")
    mo.add_argument("--json", action="store_true")
    p = sub.add_parser("platforms", help="list the platform presets")
    p.add_argument("--json", action="store_true")
    so = sub.add_parser("solvers", help="list the solvers")
    so.add_argument("--json", action="store_true")
    return parser


def _add_schedule(sub) -> None:
    """diviml schedule: solve a problem, write the plan and its pictures."""
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


def _add_run(sub) -> None:
    """diviml run: run a plan on this machine's devices, measured beside predicted."""
    r = sub.add_parser("run", help="run a plan on this machine's devices: outputs checked, time measured")
    r.add_argument("model", nargs="?", help="a zoo name (see 'diviml models') or path/to/file.py:factory, a function "
                                 "returning (module, example_inputs[, batch_dims])")
    r.add_argument("plan", nargs="?", help="plan JSON written by 'diviml schedule --out' (latency, batch or pipeline)")
    r.add_argument("--model", dest="model_option", help="the model, instead of the positional MODEL")
    r.add_argument("--platform", help="the platform the plan was scheduled for (default paper-server)")
    r.add_argument("--graph", help="the profiled graph the plan was made from: per-piece predictions, "
                                   "--calibrate-out and the predicted side of --gantt")
    r.add_argument("--batch", type=int, help="batch size to run (default: the plan's)")
    r.add_argument("--repeats", type=int, default=10, help="timed runs after the warm-up (default 10)")
    r.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    r.add_argument("--requests", type=int, help="requests each run of a pipeline plan streams through its devices "
                                                "(default 16); its time per request is measured in that stream")
    r.add_argument("--nproc", type=int, help="run as N torch.distributed (gloo) ranks on this host: one per "
                                             "server of the platform, or one per device")
    r.add_argument("--compare", action="store_true",
                   help="also run the best single device's plan (best-device on --graph) in this process, the two plans' runs in turn (blocks A B B A): both measured alike")
    r.add_argument("--trace", help="write the measured per-piece timeline as Chrome trace JSON")
    r.add_argument("--gantt", action="append", help="draw measured beside predicted (.png, .svg or .html)")
    r.add_argument("--calibrate-out", help="write the graph with times scaled to what the pieces measured")
    r.add_argument("--calibrate-platform-out",
                   help="write the platform (.yaml or .json) with the hand-offs measured between devices as links "
                        "(with --graph: their latency fitted so that the plan re-timed takes what was measured)")
    r.add_argument("--quiet", action="store_true")
    r.add_argument("--json", action="store_true")


def _add_tune(sub) -> None:
    """diviml tune: schedule, run, calibrate and schedule again until the plan stops changing."""
    t = sub.add_parser("tune", help="schedule, run, calibrate from the run and schedule again until the plan "
                                    "stops changing: the fastest plan measured")
    t.add_argument("model", help="a zoo name (see 'diviml models') or path/to/file.py:factory")
    t.add_argument("graph", help="the model's profiled graph ('diviml profile MODEL --platform P --out G')")
    t.add_argument("--platform", help="the devices to run on (default paper-server)")
    t.add_argument("--objective", choices=("latency", "batch"), default="latency")
    t.add_argument("--batch", type=int, help="requests per batch for --objective batch (default 8)")
    t.add_argument("--solver", default="split", help="the solver of every round (default split)")
    t.add_argument("--time-limit", type=float, default=5.0, help="seconds for each round's solve (default 5)")
    t.add_argument("--rounds", type=int, default=4, help="runs at most (default 4); the loop ends sooner when "
                                                          "the solver returns a plan it ran already")
    t.add_argument("--repeats", type=int, default=10, help="timed runs of each round's plan (default 10)")
    t.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    t.add_argument("--out", help="write the fastest plan measured")
    t.add_argument("--graph-out", help="write the graph that plan was solved on (the profile, or a calibration)")
    t.add_argument("--platform-out", help="write the platform that plan was solved on (.yaml or .json)")
    t.add_argument("--quiet", action="store_true")
    t.add_argument("--json", action="store_true")


def _add_profile(sub) -> None:
    """diviml profile: capture and cost a model into a graph."""
    pr = sub.add_parser("profile", help="capture and cost a zoo model into a diviml graph")
    pr.add_argument("model", nargs="?", help="a name from 'diviml models', or path/to/file.py:factory (a function "
                                             "returning (module, example_inputs[, batch_dims]): batch_dims where the "
                                             "inputs hold the batch, if not first)")
    pr.add_argument("--model", dest="model_option", help="the same as the positional MODEL")
    pr.add_argument("--platform", help="profile CPU times with the thread count of this platform's CPU devices "
                                       "(e.g. cpu-workers-2: one thread)")
    pr.add_argument("--batch", help="batch sizes, comma-separated; the first is the graph's (default 1; a "
                    "file.py:factory model: its inputs' batch, and 1 for the batch tables)")
    pr.add_argument("--device", default="cpu",
                    help="where to measure: cpu, cuda or cuda:N (times recorded under the catalogue's name for "
                         "that GPU, e.g. h100-sxm), several comma-separated (cpu,cuda: the program captured once, "
                         "measured on each, for plans over this CPU and GPU), or none (analytic costs only, weights "
                         "never allocated)")
    pr.add_argument("--repeats", type=int, default=5, help="timed runs per operator at least (median kept)")
    pr.add_argument("--min-time", type=float, default=MIN_TIMING_S,
                    help=f"seconds of timing per batch size at least, passes spread over them (default {MIN_TIMING_S:g})")
    pr.add_argument("--no-fold", action="store_true",
                    help="charge what depends on no input per request (by default it is computed once at capture)")
    pr.add_argument("--threads", type=int, help="CPU threads while measuring (fixed; default 1, or the platform's)")
    pr.add_argument("--phase", choices=("prefill", "decode"),
                    help="a language model's serving phase (gpt3-175b, llama2-7b, llama2-70b): the prefill of a "
                         "prompt, or one decoding step over a KV cache for --batch requests")
    pr.add_argument("--seq", type=int, help="prefill: tokens in the prompt (default 2048)")
    pr.add_argument("--context", type=int, help="decode: tokens already in the KV cache (default 2048)")
    pr.add_argument("--dtype", choices=("fp32", "fp16", "bf16"),
                    help="a language model's number type (default fp32): weights, activations and KV cache; "
                         "16-bit products run at the devices' tensor-core rates (catalogue)")
    pr.add_argument("--out", help="write the graph JSON")
    pr.add_argument("--quiet", action="store_true")
    pr.add_argument("--json", action="store_true")
