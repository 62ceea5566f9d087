"""The ``diviml`` command: a thin layer over the Python API.

Errors a user can fix become one line on stderr and exit status 2; no output file is written then.
The parser (:mod:`._parser`), the commands (:mod:`._commands`) and their human-readable output
(:mod:`._output`) live in modules of their own; this one runs a command.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .. import files
from ..errors import DivimlError
from . import _commands
from ._commands import (
    cmd_evaluate,
    cmd_models,
    cmd_platforms,
    cmd_profile,
    cmd_schedule,
    cmd_solvers,
    cmd_validate,
)
from ._output import _print_human
from ._parser import build_parser
from ._run import cmd_run
from ._tune import cmd_tune

COMMANDS = {"schedule": cmd_schedule, "evaluate": cmd_evaluate, "validate": cmd_validate, "profile": cmd_profile,
            "run": cmd_run, "tune": cmd_tune,
            "models": cmd_models,
            "platforms": cmd_platforms, "solvers": cmd_solvers}


def _children() -> set[int]:
    """This process's child processes: the solvers' worker pools and the ranks of 'run --nproc'."""
    pids = {p.pid for p in multiprocessing.active_children() if p.pid is not None}
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):  # Linux: children not started by multiprocessing too
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[1] == me:
                pids.add(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return pids


INTERRUPTED = threading.Event()  # set once a signal is being handled; the process then ends in that thread


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
        INTERRUPTED.set()  # from here the main thread only waits (see main): its errors are the workers' deaths
        stderr = os.dup(2)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # and what it would print on its way there is not shown
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        whole = files.RENAMING.acquire(timeout=1.5)
        for tmp in list(files.STAGING):
            Path(tmp).unlink(missing_ok=True)
        outputs = "no output is half-written" if whole else "outputs may be incomplete"
        os.write(stderr, f"diviml: interrupted ({signal.Signals(number).name}); worker processes stopped, "
                         f"{outputs}\n".encode())
        os._exit(128 + number)
    threading.Thread(target=wait, name="diviml-signals", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """Run one command (``argv``, else the program's arguments) and return its exit status. Run as the
    program, the process then ends at once, its output flushed: freeing a large problem's objects at exit
    took 0.7-0.9 s after GPT-3's plan was written, past the command's time limit."""
    as_program = argv is None and threading.current_thread() is threading.main_thread()
    try:
        status = _command(argv, as_program)
    finally:  # returned or raised, once a signal came (its workers killed under it) the signal's thread ends it
        if as_program and INTERRUPTED.is_set():
            threading.Event().wait()
    if as_program:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def _command(argv: list[str] | None, as_program: bool) -> int:
    args = build_parser().parse_args(argv)
    if as_program:
        _exit_on_signal()
    args.argv = list(sys.argv[1:] if argv is None else argv)
    # a time limit counts the whole command: as the program from the process's start, called here from now
    args.started = _commands.PROCESS_STARTED if argv is None else time.monotonic()
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
