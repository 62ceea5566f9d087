"""Interrupting a run (SIGINT, SIGTERM) ends it within 2 s, stops every worker process, keeps old output
files whole, and says so in one line: even while the solver is deep in native code."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diviml.generators import layered_dag


def alive(pid: str) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_ends_the_run_and_its_workers_at_once_and_keeps_old_outputs(tmp_path, sig, code):
    layered_dag(3000, seed=1).save(tmp_path / "g.json")
    out = tmp_path / "plan.json"
    out.write_text("the plan of an earlier run")
    p = subprocess.Popen([sys.executable, "-m", "diviml", "schedule", tmp_path / "g.json", "--solver", "split",
                          "--time-limit", "120", "--out", out], stderr=subprocess.PIPE, text=True)
    for line in p.stderr:  # the pool is working: module solves are under way
        if "module 5/" in line:
            break
    workers = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    assert workers, "split runs a pool of worker processes"
    started = time.perf_counter()
    p.send_signal(sig)
    assert p.wait(timeout=10) == code
    assert time.perf_counter() - started < 2.0
    rest = p.stderr.read().strip().splitlines()
    assert rest[-1].startswith(f"diviml: interrupted ({signal.Signals(sig).name})")
    time.sleep(0.2)
    assert not [w for w in workers if alive(w)]
    assert out.read_text() == "the plan of an earlier run"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["g.json", "plan.json"]  # no temporaries left


@pytest.mark.slow  # over 20 s on 2 cores: the README's test command runs it after the rest
def test_a_signal_ends_a_run_inside_cp_sat():
    p = subprocess.Popen([sys.executable, "-m", "diviml", "schedule", Path(__file__).parent.parent / "examples" /
                          "layered40.json", "--objective", "batch", "--batch", "32", "--solver", "exact",
                          "--time-limit", "120"], stderr=subprocess.PIPE, text=True)
    for line in p.stderr:  # CP-SAT is searching the second batch split (about 6 s each)
        if "batch split 2/" in line:
            break
    time.sleep(1.0)
    started = time.perf_counter()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 143 and time.perf_counter() - started < 2.0


RUN_WHOSE_MAIN_THREAD_FAILS_AS_ITS_WORKER_DIES = """
import multiprocessing, sys, time
from diviml import cli, files

def schedule(args):  # stands for a solve whose pool breaks when the signal's thread kills its workers
    worker = multiprocessing.Process(target=time.sleep, args=(60,))
    worker.start()
    files.RENAMING.acquire()  # outputs being renamed: the signal's thread waits for them (up to 1.5 s)
    sys.stderr.write("solving\\n")
    sys.stderr.flush()
    worker.join()
    raise RuntimeError("a worker died under the solve")

cli.COMMANDS["schedule"] = schedule
sys.argv = ["diviml", "schedule", "g.json"]
cli.main()
"""


def test_a_signal_is_reported_in_one_line_even_when_killing_the_workers_makes_the_main_thread_fail():
    p = subprocess.Popen([sys.executable, "-c", RUN_WHOSE_MAIN_THREAD_FAILS_AS_ITS_WORKER_DIES],
                         stderr=subprocess.PIPE, text=True)
    assert p.stderr.readline() == "solving\n"
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=10) == 130
    rest = p.stderr.read()
    assert rest == "diviml: interrupted (SIGINT); worker processes stopped, outputs may be incomplete\n"
