"""The guard-rates benchmark: every flag's rate on honest replies, run on a tiny synthetic data directory."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from care_lab.bench.guard_rates import COUNTED_FLAGS, REWARD_CHANGED, honest_sets, measure
from care_sdk.guards import Guards

ROOT = Path(__file__).resolve().parents[1]
SAID = "I lost my job today and I don't know what to do with myself anymore."
OWN = "That is a lot to take in at once, and it makes sense that you feel unmoored right now."


def _jsonl(path: Path, rows: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _data(root: Path) -> Path:
    """Two ESConv splits, three Lend-an-Ear conversations with judged replies, two SAGE systems."""
    dialog = [
        {"speaker": "usr", "text": SAID},
        {"speaker": "sys", "text": OWN, "strategy": "Reflection of feelings"},
        {"speaker": "usr", "text": "They closed the whole office."},
        {"speaker": "sys", "text": "So you lost your job today and you don't know what to do with yourself anymore."},
    ]
    for split in ("valid", "test"):
        _jsonl(root / "esconv" / f"{split}.jsonl", [{"dialog": dialog}, {"dialog": dialog[:2]}])
    base = root / "mint_lend_an_ear" / "lend_an_ear_eval"
    base.mkdir(parents=True)
    with (base / "lend_an_ear_50_conversations.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["conversation_id", "full_conversation", "response_length"])
        for cid in ("c1", "c2", "c3"):
            writer.writerow([cid, f"Seeker: {SAID}\nSupporter: {OWN}\nSeeker: thanks\nSupporter: Take care.", "1"])
    judged = [
        {"system": system, "conversation_id": cid, "turn_index": 3, "response": reply, "aggregated_empathy": 3.0}
        for cid in ("c1", "c2", "c3")
        for system, reply in (("gold", "Take care."), ("qwen_a", OWN), ("qwen_b", "User: thank you!"))
    ]
    _jsonl(root / "mint_lend_an_ear" / "judged_turns" / "judged_turn_responses_gold_and_qwen3-4b_systems.jsonl", judged)
    for model, last in (("sys-a", OWN), ("sys-b", "")):
        history = [
            {"role": "user", "content": SAID, "emotion-point": 40},
            {"role": "assistant", "content": OWN},
            {"role": "user", "content": "ok", "emotion-point": 45, "planning": {"change": 5}},
            {"role": "assistant", "content": last},
            {"role": "user", "content": "bye", "emotion-point": 42, "planning": {"change": -3}},
        ]
        _jsonl(
            root / "sage_rlver" / "results_sim" / f"{model}_result.jsonl",
            [{"id": "p1", "history": history, "emo_point": 42}],
        )
    return root


def test_honest_sets_read_every_data_set_with_roles(tmp_path: Path) -> None:
    sets = {s.name: s for s in honest_sets(_data(tmp_path))}
    assert list(sets) == [
        "esconv_valid",
        "esconv_test",
        "lend_an_ear_human",
        "lend_an_ear_qwen3_4b",
        "sage_sys-a",
        "sage_sys-b",
    ]
    assert [len(s.turns) for s in sets.values()] == [3, 3, 6, 6, 2, 2]
    assert {s.role for s in sets.values()} == {"selection"}  # the SAGE sets hold no test turn
    assert [sets[n].meta["skipped_test_turns"] for n in ("sage_sys-a", "sage_sys-b")] == [0, 0]
    context, reply = sets["lend_an_ear_qwen3_4b"].turns[0]
    assert [m.role for m in context] == ["user", "assistant", "user"] and reply == OWN  # the human dialogue so far
    report = measure(list(sets.values()))
    rates = report["rates"]
    assert rates["esconv_test"]["copied_user"] == {"count": 1, "n": 3, "rate": round(1 / 3, 6)}
    assert rates["sage_sys-a"]["repeated_own_turn"]["count"] == 1
    assert rates["sage_sys-b"]["empty_reply"]["count"] == 1
    assert rates["lend_an_ear_qwen3_4b"]["forged_turn"]["count"] == 3
    assert rates["lend_an_ear_qwen3_4b"]["repeated_own_turn"]["count"] == 3  # report only
    assert rates["lend_an_ear_qwen3_4b"][REWARD_CHANGED]["count"] == 3
    flagged = {(v["flag"], v["set"]) for v in report["violations"]}
    assert ("copied_user", "esconv_test") in flagged and ("forged_turn", "lend_an_ear_qwen3_4b") in flagged
    assert not any(flag == "repeated_own_turn" for flag, _ in flagged)  # its default policy reports only
    assert report["emotion_after_repeated_own_turn"]["sage_sys-a"] == {
        "flagged": {"n": 1, "mean": -3.0},
        "unflagged": {"n": 1, "mean": 5.0},
    }
    zeroing = measure([sets["sage_sys-a"]], Guards(flag_policies={"repeated_own_turn": "zero"}))
    assert [v["flag"] for v in zeroing["violations"]] == ["repeated_own_turn"]


def test_the_rates_script_runs_and_writes_its_results_file(tmp_path: Path) -> None:
    data = _data(tmp_path / "data")
    out = tmp_path / "guard_rates.json"
    script = ROOT / "benchmarks" / "bench_guard_rates.py"
    done = subprocess.run(
        [sys.executable, str(script), "--data-dir", str(data), "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["benchmark"] == "guard-rates" and report["command"].startswith(
        "python benchmarks/bench_guard_rates.py"
    )
    assert [d["role"] for d in report["data"]] == ["selection"] * 6 and report["role"] == "selection"
    assert report["test_reads"] == 0 and [d["read"] for d in report["data"]] == [3, 3, 6, 6, 2, 2]
    assert all(d["files"] for d in report["data"])
    assert set(report["rates"]["esconv_valid"]) == {*COUNTED_FLAGS, REWARD_CHANGED}
    assert report["policies"]["copied_user"] == "zero" and report["policies"]["repeated_own_turn"] == "report"
    assert "| `copied_user` | zero | 1 / 3 (33.33%) |" in done.stdout
    assert "flags over 1 % of honest replies" in done.stdout


def test_the_sage_sets_skip_every_test_turn_and_count_them(data_dir: Path) -> None:
    from care_lab.data.sage_turns import sage_rollout_files, sage_turn_roles

    sets = {s.name: s for s in honest_sets(data_dir) if s.name.startswith("sage_")}
    roles = sage_turn_roles(sage_rollout_files(data_dir))
    assert sum(s.meta["skipped_test_turns"] for s in sets.values()) == sum(r == "test" for r in roles.values())
    changes = [d for s in sets.values() for d in s.meta["deltas"] if d is not None]
    assert len(changes) == sum(r == "selection" for r in roles.values())  # the only emotion changes read
