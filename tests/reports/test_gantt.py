"""The plan page is shared: nothing from an input file may become markup. Its script runs here under Node.js
(the machine's, as in CI) against a minimal document, and the markup it draws is parsed as a browser would."""

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

import diviml
from diviml import Objective, Problem, TaskGraph
from diviml.graph import Task
from diviml.reports.gantt import html_page

EVIL = 'b"><img src=x onerror=alert(2)>'

DOCUMENT = """
const nodes = {chart: {clientWidth: 900, innerHTML: '', addEventListener() {}}, tip: {style: {}}, legend: {innerHTML: ''},
               zoom: {value: 1}, showTransfers: {checked: true}, hidden: {textContent: ""}};
globalThis.document = {getElementById: id => nodes[id]};
"""


class Elements(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attributes, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes.extend(v for _, v in attrs if v)

    def handle_data(self, data):
        self.text.append(data)


def drawn_markup(page: str) -> str:
    script = re.search(r"<script>(.*)</script>", page, re.S).group(1)
    program = DOCUMENT + script + "\nprocess.stdout.write(JSON.stringify(nodes.chart.innerHTML));"
    node = shutil.which("node") or shutil.which("nodejs")
    assert node, "Node.js is needed to run the page's script (apt install nodejs)"
    out = subprocess.run([node, "-e", program], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_task_ids_device_names_and_modules_are_drawn_as_text_not_markup():
    tasks = [Task(id=EVIL, time={"cpu": 1.0, "a100": 0.5}, module=EVIL), Task(id="next", time={"cpu": 1.0, "a100": 0.5})]
    graph = TaskGraph.create(tasks, [(EVIL, "next")], name=EVIL)
    platform = diviml.Platform.from_dict({"devices": [{"name": "cpu", "type": "cpu", "host": True},
                                                      {"name": EVIL, "type": "a100", "link": {"bandwidth": 1e9}}]})
    problem = Problem(graph, platform, Objective("latency"))
    plan = diviml.solve(problem, "heft", time_limit=5)
    page = html_page(plan, problem)
    assert "<img" not in page.split("<script>")[0]  # the title and summary rows
    parsed = Elements()
    parsed.feed(drawn_markup(page))
    assert "img" not in parsed.tags and set(parsed.tags) <= {"svg", "text", "rect", "line", "title"}
    assert any(EVIL in a for a in parsed.attributes)  # the tooltip says the id as it is
    assert EVIL in "".join(parsed.text)  # and the device row is labelled with its name


def test_zero_time_operators_that_wait_on_a_device_do_not_trap_the_critical_path_walk():
    from diviml.plan import Assignment, Plan
    from diviml.reports.timeline import bars_and_transfers

    tasks = [Task("s", {"cpu": 0.5}), Task("x", {"cpu": 1.0}), Task("z1", {"cpu": 0.0}), Task("z2", {"cpu": 0.0}),
             Task("c", {"cpu": 1.0})]
    graph = TaskGraph.create(tasks, [("s", "z1"), ("s", "z2"), ("z1", "c"), ("z2", "c"), ("x", "c")])
    platform = diviml.Platform.from_dict({"devices": [{"name": "cpu", "type": "cpu", "host": True}]})
    problem = Problem(graph, platform, Objective("latency"))
    starts = {"s": 0.0, "x": 0.5, "z1": 1.5, "z2": 1.5, "c": 1.5}
    plan = Plan("latency", tuple(Assignment(t, "cpu", starts[t]) for t in starts), 2.5, 2.5, "optimal", "hand")
    assert diviml.validate(plan, problem).ok
    bars, _ = bars_and_transfers(plan, problem)  # looped forever between z1 and z2 before
    assert {b.task for b in bars if b.critical} >= {"c", "x"}


def test_the_trace_has_a_thread_per_device_and_every_task_part_and_transfer_in_microseconds(tmp_path):
    import subprocess
    import sys

    from diviml.generators import layered_dag

    problem = Problem(layered_dag(20, seed=3), diviml.preset("paper-server"), Objective("batch", batch_size=4))
    plan = diviml.solve(problem, "data-parallel", time_limit=10)
    problem.graph.save(tmp_path / "g.json")
    r = subprocess.run([sys.executable, "-m", "diviml", "schedule", tmp_path / "g.json", "--objective", "batch",
                        "--batch", "4", "--solver", "data-parallel", "--time-limit", "10",
                        "--trace", tmp_path / "t.json", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    trace = json.loads((tmp_path / "t.json").read_text())
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"cpu", "v100", "a100"} <= threads
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] != "transfer"]
    assert len(spans) == len(plan.assignments)
    last = max(e["ts"] + e["dur"] for e in spans)
    assert last == pytest.approx(plan.objective * 1e6, rel=1e-6)  # the same seed gives the same plan


def test_a_data_parallel_plan_is_drawn_by_sub_batch_with_no_transfers_between_its_parts():
    from diviml.generators import layered_dag
    from diviml.reports.timeline import bars_and_transfers, colouring

    problem = Problem(layered_dag(20, seed=3), diviml.preset("paper-server"), Objective("batch", batch_size=8))
    plan = diviml.solve(problem, "data-parallel", time_limit=10)
    assert len({a.device for a in plan.assignments}) > 1  # the batch is shared between devices
    bars, transfers = bars_and_transfers(plan, problem)
    gpus = {"a100", "v100"}
    assert not [t for t in transfers if {t.src, t.dst} <= gpus]  # each part reads only its own rows
    by, colours = colouring(bars)
    assert by == "sub-batch" and len(colours) == len({a.batch for a in plan.assignments if a.task == "t0"})


def cluster_problem():
    """Two servers of a CPU and two GPUs, listed interleaved, running a chain that holds weights."""
    devices = []
    for g in range(2):
        for s in ("s0", "s1"):
            devices.append({"name": f"{s}gpu{g}", "type": "a100", "server": s, "memory": 40e9,
                            "link": {"bandwidth": 25e9}})
    devices += [{"name": f"{s}cpu", "type": "cpu", "server": s, "host": True} for s in ("s0", "s1")]
    platform = diviml.Platform.from_dict({"devices": devices, "network": {"bandwidth": 12.5e9}})
    tasks = [Task(f"t{i}", {"cpu": 2.0, "a100": 0.1}, memory_bytes=15e9, output_bytes=1e6) for i in range(8)]
    graph = TaskGraph.create(tasks, [(f"t{i}", f"t{i + 1}") for i in range(7)])
    return Problem(graph, platform, Objective("latency"))


def test_a_clusters_devices_read_server_by_server_each_with_the_memory_the_plan_holds_on_it():
    from diviml.reports.timeline import device_rows
    problem = cluster_problem()
    plan = diviml.solve(problem, "heft", time_limit=5)
    rows = device_rows(plan, problem)
    assert [r.server for r in rows] == ["s0"] * 3 + ["s1"] * 3
    assert sum(r.held for r in rows) == pytest.approx(8 * 15e9)
    held = {r.device: r for r in rows}
    busiest = max((r for r in rows if r.capacity < float("inf")), key=lambda r: r.held)
    assert busiest.memory == f"{busiest.held / 1e9:.3g} GB of 40 GB ({busiest.held / 40e9:.0%})"
    assert held["s0cpu"].label == "s0cpu (cpu)"
    drawn = Elements()
    drawn.feed(drawn_markup(html_page(plan, problem)))
    text = "".join(drawn.text)
    assert "server s0" in text and "server s1" in text and busiest.memory in text
    labels = [text.index(f"{r.label}") for r in rows]
    assert labels == sorted(labels)  # rows drawn server by server


def test_a_clusters_picture_renders_as_png_and_svg_with_its_servers_named(tmp_path):
    from diviml.reports.gantt import render
    problem = cluster_problem()
    for objective in ("latency", "pipeline"):
        p = Problem(problem.graph, problem.platform, Objective(objective))
        plan = diviml.solve(p, "heft" if objective == "latency" else "greedy", time_limit=5)
        assert render(plan, p, tmp_path / "plan.png")[:8] == b"\x89PNG\r\n\x1a\n"
        svg = render(plan, p, tmp_path / "plan.svg")
        svg = svg.decode() if isinstance(svg, bytes) else svg
        assert "server s1" in svg and "GB of 40 GB" in svg


def test_where_the_receiver_spends_transfers_a_bar_holds_them_and_each_is_drawn_inside_it():
    from diviml.reports.timeline import bars_and_transfers
    from diviml.solvers.engines.plans import Stopwatch, make_plan
    tasks = [Task("a", {"host": 1.0}, output_bytes=1.0), Task("b", {"host": 2.0}, output_bytes=1.0),
             Task("c", {"host": 1.0}, output_bytes=1.0), Task("d", {"host": 1.0})]
    graph = TaskGraph.create(tasks, [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    platform = diviml.Platform.from_dict({"transfers": "receiver", "devices": [
        {"name": f"w{i}", "type": "host", "host": True, "handoff": 0.25} for i in range(2)]})
    problem = Problem(graph, platform, Objective("latency"))
    plan = make_plan(problem, placement={"a": "w0", "b": "w0", "c": "w1", "d": "w1"}, solver="hand",
                     status="feasible", watch=Stopwatch(1))
    bars, transfers = bars_and_transfers(plan, problem)
    bar = {b.task: b for b in bars}
    # w1 receives a's value (0.5 s) before c: [1, 2.5]; then b's before d: b ends at 3, d over [3, 4.5]
    assert (bar["c"].start, bar["c"].finish) == (1.0, 2.5) and (bar["d"].start, bar["d"].finish) == (3.0, 4.5)
    assert [(t.task, t.dst, t.start, t.finish) for t in transfers] == [("a", "w1", 1.0, 1.5), ("b", "w1", 3.0, 3.5)]
    assert max(b.finish for b in bars) == plan.objective == 4.5
    assert bar["d"].critical and bar["b"].critical
