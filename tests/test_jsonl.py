"""One JSONL reader and writer: every bad line is named by file, line, field and reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from care_lab.data.roles import write_roles
from care_lab.training._common import read_records as read_build_records
from care_sdk.dialogues import read_dialogues
from care_sdk.errors import InputError
from care_sdk.jsonl import BadLine, iter_jsonl, read_jsonl, replace_jsonl, write_jsonl
from care_sdk.report.records import read_records

LINES = ['{"id": "a", "turn": 1}', "", "{broken", "[1]", '{"id": "b", "turn": "x"}', '{"id": "c", "turn": 3}']


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_bad_lines_are_collected_with_line_field_and_reason(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", LINES)
    bad: list[BadLine] = []

    def check(record: dict[str, object]) -> tuple[str | None, str] | None:
        return None if isinstance(record["turn"], int) else ("turn", "expected an integer")

    good = list(iter_jsonl(path, on_bad=bad.append, check=check))
    assert [n for n, _ in good] == [1, 6]
    assert [(b.line, b.field) for b in bad] == [(3, None), (4, None), (5, "turn")]
    assert bad[0].reason.startswith("not valid JSON") and bad[1].reason == "expected a JSON object, got list"
    assert str(bad[2]) == f"{path}:line 5: turn: expected an integer"


def test_without_a_handler_the_first_bad_line_raises(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", LINES)
    with pytest.raises(BadLine, match=r"r.jsonl:line 3: not valid JSON") as info:
        read_jsonl(path)
    assert isinstance(info.value, InputError) and info.value.line == 3


def test_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        list(iter_jsonl(tmp_path / "nope.jsonl"))


def test_write_and_read_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    assert write_jsonl(path, [{"text": "ça va"}]) == 1
    assert write_jsonl(path, [{"n": 2}], append=True) == 1
    assert read_jsonl(path) == [{"text": "ça va"}, {"n": 2}]
    assert "ça va" in path.read_text(encoding="utf-8")


def test_an_interrupted_rewrite_leaves_the_old_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    write_jsonl(path, [{"n": 1}, {"n": 2}])

    def records() -> Iterator[dict[str, int]]:
        yield {"n": 3}
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        replace_jsonl(path, records())
    assert read_jsonl(path) == [{"n": 1}, {"n": 2}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.jsonl"]
    assert replace_jsonl(path, [{"n": 3}]) == 1
    assert read_jsonl(path) == [{"n": 3}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.jsonl"]


def test_every_reader_reports_the_same_way(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", LINES)
    # scored records: collected
    assert [str(e).split(": ", 1)[0] for e in read_records(path).issues] == [f"{path}:line {n}" for n in (3, 4, 5)]
    # dialogues: one error per bad line, in file order
    errors = [x.error for x in read_dialogues(path) if x.error is not None]
    assert [getattr(e, "line", None) for e in errors] == [1, 3, 4, 5, 6]
    # build-data records (a file declared trainable): the first bad line raises
    write_roles(tmp_path, {"r.jsonl": "train"})
    with pytest.raises(BadLine, match="line 3"):
        read_build_records(path, "sft")
    assert json.loads(LINES[0]) == read_build_records(path, "sft", limit=1)[0]
