"""The plan page in a real browser: headless Chromium (Debian's package; .ci/run installs it) driven by
Playwright. A person hovers a task, hides the transfers, zooms in; nothing from the input becomes markup and
the page logs no error."""

import shutil

import pytest

import diviml
from diviml import Objective, Problem, TaskGraph
from diviml.graph import Task
from diviml.reports.gantt import html_page

EVIL = 'b"><img src=x onerror=alert(2)>'


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "the browser tests need Chromium: apt-get install chromium (.ci/run does)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


def hostile_plan_page(tmp_path):
    tasks = [Task(id=EVIL, time={"cpu": 1.0, "a100": 0.4}, module=EVIL, output_bytes=4e9),
             Task(id="mid", time={"cpu": 0.5, "a100": 2.0}, output_bytes=4e9),
             Task(id="last", time={"cpu": 1.0, "a100": 0.4})]
    graph = TaskGraph.create(tasks, [(EVIL, "mid"), ("mid", "last")], name=EVIL)
    platform = diviml.Platform.from_dict({"devices": [{"name": "cpu", "type": "cpu", "host": True},
                                                      {"name": EVIL, "type": "a100", "link": {"bandwidth": 1e10}}]})
    problem = Problem(graph, platform, Objective("latency"))
    plan = diviml.solve(problem, "exact", time_limit=10)
    assert len({a.device for a in plan.assignments}) == 2  # the plan crosses devices: transfers are drawn
    path = tmp_path / "plan.html"
    path.write_text(html_page(plan, problem))
    return path


def test_the_page_draws_hostile_names_as_text_and_answers_hover_toggle_and_zoom(browser, tmp_path):
    page = browser.new_page(viewport={"width": 1200, "height": 700})
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(hostile_plan_page(tmp_path).as_uri())

    assert page.locator("img").count() == 0 and not dialogs  # nothing injected, nothing ran
    assert EVIL in page.locator("#chart").inner_text()  # the device row's label, as text
    assert EVIL in page.title()

    bars = page.locator("#chart rect.task")
    assert bars.count() == 3
    bars.first.hover()
    tip = page.locator("#tip")
    assert tip.is_visible() and " on " in tip.text_content()

    assert page.locator("#chart line.transfer").count() > 0
    page.locator("#showTransfers").uncheck()
    assert page.locator("#chart line.transfer").count() == 0

    width = float(page.locator("#chart svg").get_attribute("width"))
    page.locator("#zoom").evaluate("z => { z.value = 4; z.dispatchEvent(new Event('input')); }")
    assert float(page.locator("#chart svg").get_attribute("width")) == pytest.approx(4 * width, rel=0.01)

    assert "critical path" in page.locator("#legend").inner_text()
    page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    assert not errors, errors


def test_a_plan_of_twenty_thousand_tasks_opens_as_merged_bars_that_zooming_takes_apart(browser, tmp_path):
    import random
    from dataclasses import replace

    from diviml import Assignment, Plan
    from diviml.generators import layered_dag
    from diviml.simulate import schedule
    g = layered_dag(20_000, seed=1)
    g = TaskGraph.create([replace(t, memory_bytes=0.0) for t in g.tasks], g.edges)
    problem = Problem(g, diviml.preset("paper-server"))
    rng = random.Random(0)
    devices = [d.name for d in problem.platform.devices]
    timed = schedule(problem, {t.id: [(rng.choice(devices), 1)] for t in problem.graph.tasks})
    plan = Plan("latency", tuple(Assignment(j.task, j.device, j.start) for j in timed.jobs), timed.makespan, 0.0,
                "feasible", "random", batch_size=1)
    path = tmp_path / "big.html"
    path.write_text(html_page(plan, problem))
    from diviml.reports.gantt import render
    assert render(plan, problem, tmp_path / "big.png")[:4] == b"\x89PNG"  # one collection a device, merged bars

    page = browser.new_page(viewport={"width": 1200, "height": 700})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    shapes = page.locator("#chart rect").count()
    assert 0 < shapes < 5_000  # not 20,000 bars and their transfers: what a pixel can show
    summary = page.locator("#chart rect.summary").first
    summary.hover()
    assert "tasks on" in page.locator("#tip").text_content()
    assert "transfers under a pixel not drawn" in page.locator("#hidden").text_content()
    page.locator("#zoom").evaluate("z => { z.value = 20; z.dispatchEvent(new Event('input')); }")
    assert page.locator("#chart rect").count() > shapes  # zoomed in, more of them stand apart
    assert not errors, errors


def test_a_runs_stream_page_opens_with_a_bar_per_piece_and_no_error(browser, tmp_path):
    from test_measured import stream_report  # the same directory: a stream of 10 requests over two devices

    from diviml.reports import measured
    path = tmp_path / "stream.html"
    path.write_text(measured.render_gantt(stream_report(requests=10, pieces=3), path))
    page = browser.new_page(viewport={"width": 1200, "height": 500})
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    assert page.locator("rect").count() == 60
    titles = page.locator("rect title").all_text_contents()
    assert all(any(f"(request {r})" in t for t in titles) for r in range(10))
    assert not errors
    page.close()
