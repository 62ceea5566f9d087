"""Files: inputs read with a clear error, outputs written whole or not at all."""

import json
import threading

import pytest

from diviml.errors import InputError
from diviml.files import write_files_atomic, write_text_atomic


def test_concurrent_writers_of_one_file_neither_fail_nor_leave_it_half_written(tmp_path):
    target = tmp_path / "plan.json"
    payloads = [json.dumps({"writer": w, "pad": "x" * 100_000}) for w in range(4)]
    errors, seen = [], set()

    def write(text):
        try:
            for _ in range(100):
                write_text_atomic(target, text)
        except Exception as exc:  # any failure is the defect
            errors.append(exc)

    def read():
        for _ in range(300):
            if target.exists():
                seen.add(json.loads(target.read_text())["writer"])  # whole, never torn

    threads = [threading.Thread(target=write, args=(p,)) for p in payloads] + [threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and json.loads(target.read_text())["writer"] in range(4)
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary left behind


def test_a_set_of_outputs_is_written_whole_or_not_at_all(tmp_path):
    (tmp_path / "plan.json").write_text("old")
    (tmp_path / "page.html").mkdir()  # cannot become a file
    with pytest.raises(InputError, match="page.html"):
        write_files_atomic([(tmp_path / "plan.json", "new"), (tmp_path / "page.html", "<html>")])
    assert (tmp_path / "plan.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "plan.json"]
