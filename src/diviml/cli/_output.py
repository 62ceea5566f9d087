"""What each command prints for a person (its --json output is the same dict as JSON)."""

from __future__ import annotations

from ..plan import format_gap


def _print_human(command: str, out: dict) -> None:
    """Print ``out``, what ``command`` returned, for a person."""
    PRINTERS.get(command, _print_plan)(out)


def _print_platforms(out: dict) -> None:
    for name, p in out["platforms"].items():
        print(f"{name}: {p['description']}")
        for d in p["devices"]:
            mem = "unlimited" if d["memory_bytes"] is None else f"{d['memory_bytes']:.3g} B"
            handoff = f"   hand-off {d['handoff_s'] * 1e6:g} us in or out" if d["handoff_s"] else ""
            print(f"    {d['name']:<10} {d['type']:<12} {mem:<12} {d['server']}{handoff}")
        if p["transfers"] == "receiver":
            print("    transfers: the receiving device spends each one before the job that reads it")


def _print_solvers(out: dict) -> None:
    for name, s in out["solvers"].items():
        print(f"{name:<12} [{', '.join(s['objectives'])}] {s['summary']}")
        if s["options"]:
            print(f"{'':<12} options: {' '.join(s['options'])}")


def _print_validate(out: dict) -> None:
    print("valid" if out["valid"] else "INVALID")
    for v in out["violations"]:
        print(f"  - {v}")
    print(f"objective {out['objective']} (claimed {out['claimed_objective']}), bound {out['bound']}")


def _print_models(out: dict) -> None:
    for name, summary in out["models"].items():
        print(f"{name:<20} {summary}")


def _print_profile(out: dict) -> None:
    print(f"{out['model']}: {out['tasks']} tasks, {out['edges']} edges, batch {out['batch_size']}, "
          f"{out['flops'] / 1e9:.3g} GFLOP, {out['memory_bytes'] / 1e6:.4g} MB of weights")
    width = max(map(len, out["total_time_s"]), default=0)
    for dt, t in out["total_time_s"].items():
        how = ("measured" if dt in out["measured_types"] else
               "derived from host" if dt == "cpu" and out["measured"] == "host" else "roofline")
        print(f"  {dt:<{width}}  {t * 1e3:>10.4g} ms  ({how})")
    c = out["calibration"]
    if c:
        print(f"  roofline vs measured on {c['device_type']}: median operator error {100 * c['median_error_before']:.0f}%, "
              f"{100 * c['median_error_after']:.0f}% after scaling by {c['scale']:.3g}")
    for n in out["notes"]:
        print(f"  note: {n}")
    for p in out["written"]:
        print(f"wrote {p}")


def _print_run(out: dict) -> None:
    stream = out.get("requests", 1) > 1  # a pipeline plan: a stream of requests, timed per request
    what = f" per request in streams of {out['requests']}" if stream else ""
    print(f"{out['model']} batch {out['batch_size']} on {len(out['devices'])} device(s), {out['pieces']} "
          f"pieces, {out['world_size']} rank(s): measured {out['measured_s'] * 1e3:.4g} ms{what} (median of "
          f"{out['repeats']}, {out['measured_min_s'] * 1e3:.4g}-{out['measured_max_s'] * 1e3:.4g}), predicted "
          f"{out['predicted_s'] * 1e3:.4g} ms{' (largest device load)' if stream else ''}, ratio "
          f"{out['ratio']:.3f}; outputs match the unsplit module (largest difference {out['max_abs_error']:.3g}); "
          f"unsplit module here {out['eager_s'] * 1e3:.4g} ms")
    if "single_device" in out:
        print(f"best single device {out['single_device']}: measured {out['single_measured_s'] * 1e3:.4g} ms "
              f"(predicted {out['single_predicted_s'] * 1e3:.4g} ms); this plan runs at {out['speedup']:.3f}x its "
              "speed")
    for n in out["notes"]:
        print(f"  note: {n}")
    for p in out["written"]:
        print(f"wrote {p}")


def _print_evaluate(out: dict) -> None:
    for d, load in out["loads"].items():
        print(f"  {d:<8} load {load:.6g}")
    label = "max-load" if out["objective_kind"] == "pipeline" else "latency"
    print(f"{label} {out['objective']:.6g} {out['time_unit']}")


def _print_plan(out: dict) -> None:
    """A schedule's plan: objective, bound, gap, status; notes; files written."""
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


def _print_tune(out: dict) -> None:
    for k, r in enumerate(out["rounds"]):
        mark = "  <- fastest" if k == out["best_round"] else ""
        print(f"round {k + 1}: {r['pieces']} pieces on {len(r['devices'])} device(s), predicted "
              f"{r['predicted_s'] * 1e3:.4g} ms, measured {r['measured_s'] * 1e3:.4g} ms "
              f"({r['measured_min_s'] * 1e3:.4g}-{r['measured_max_s'] * 1e3:.4g}), ratio {r['ratio']:.3f}{mark}")
    how = "the solver returned a plan already run" if out["converged"] else "out of rounds"
    print(f"{out['model']}: round {out['best_round'] + 1} fastest, {out['speedup_over_first']:.3f}x the first "
          f"round's plan ({how})")
    for p in out["written"]:
        print(f"wrote {p}")


PRINTERS = {"platforms": _print_platforms, "solvers": _print_solvers, "validate": _print_validate,
            "models": _print_models, "profile": _print_profile, "run": _print_run, "evaluate": _print_evaluate,
            "tune": _print_tune}
