"""The plan page is shared: nothing from an input file may become markup. Its script runs here under Node.js
(the machine's, as in CI) against a minimal document, and the markup it draws is parsed as a browser would."""

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import diviml
from diviml import Objective, Problem, TaskGraph
from diviml.graph import Task
from diviml.reports.gantt import html_page

EVIL = 'b"><img src=x onerror=alert(2)>'

DOCUMENT = """
const nodes = {chart: {clientWidth: 900, innerHTML: '', addEventListener() {}}, tip: {style: {}},
               zoom: {value: 1}, showTransfers: {checked: true}};
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
