"""Loaders: ESConv (both layouts), MINT / Lend-an-Ear, SAGE; issues name file, position and field."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from care_lab.data import (
    LoadIssue,
    load_esconv,
    load_judged_turns,
    load_lend_an_ear,
    load_mint_conversations,
    load_sage_profiles,
    load_sage_rollouts,
)
from care_sdk.errors import InputError
from care_sdk.types import Dimension

DATA = Path(os.environ["CARE_DATA_DIR"])  # set by the conftest.py at the repository root
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data not found at {DATA} (set CARE_DATA_DIR)")


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_merges_consecutive_utterances_and_keeps_all_strategies(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "train.jsonl",
        [
            {
                "emotion_type": "anxiety",
                "problem_type": "job crisis",
                "situation": "s",
                "survey_score": {
                    "seeker": {
                        "initial_emotion_intensity": "4",
                        "empathy": "5",
                        "relevance": "",
                        "final_emotion_intensity": "2",
                    },
                    "supporter": {},
                },
                "dialog": [
                    {"speaker": "sys", "text": "Hi!", "strategy": "Question"},
                    {"speaker": "usr", "text": "I am scared."},
                    {"speaker": "usr", "text": "I may lose my job."},
                    {"speaker": "sys", "text": "That sounds frightening.", "strategy": "Reflection of feelings"},
                    {"speaker": "sys", "text": "What did your boss say?", "strategy": "Question"},
                ],
            }
        ],
    )
    loaded = load_esconv(path)
    assert loaded.ok
    d = loaded[0]
    assert [m.role for m in d.messages] == ["assistant", "user", "assistant"]
    assert d.messages[1].content == "I am scared.\nI may lose my job."
    assert d.strategies == (("Question",), None, ("Reflection of feelings", "Question"))
    assert d.metadata["emotion_type"] == "anxiety"
    assert d.metadata["seeker_initial_emotion_intensity"] == 4
    assert d.metadata["seeker_relevance"] is None
    assert d.metadata["split"] == "train"
    turns = d.supporter_turns()
    assert len(turns) == 1  # the opening greeting has no context
    assert turns[0].counts == {Dimension.COGNITIVE: 1, Dimension.AFFECTIVE: 1, Dimension.PROACTIVE: 0}
    assert [m.role for m in turns[0].context] == ["assistant", "user"]
    assert d.to_dialogue().messages == d.messages


def test_original_layout_normalises_strategy_names_and_keeps_feedback(tmp_path: Path) -> None:
    path = tmp_path / "FailedESConv.json"
    path.write_text(
        json.dumps(
            [
                {
                    "emotion_type": "depression",
                    "problem_type": "p",
                    "situation": "s",
                    "survey_score": {},
                    "dialog": [
                        {"speaker": "speaker", "annotation": {}, "content": "Hey there\n"},
                        {"speaker": "listener", "annotation": {"strategy": "Questions"}, "content": "What is wrong?"},
                        {
                            "speaker": "listener",
                            "annotation": {"strategy": "Direct Guidance"},
                            "content": "Take a walk.",
                        },
                        {"speaker": "speaker", "annotation": {"feedback": "2"}, "content": "ok"},
                    ],
                }
            ]
        )
    )
    d = load_esconv(path)[0]
    assert d.source == "esconv-failed"
    assert d.messages[0].content == "Hey there"
    assert d.strategies[1] == ("Question", "Providing Suggestions")
    assert d.metadata["feedback"] == [[2, 2]]


def test_bad_records_are_reported_with_file_position_and_field(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "valid.jsonl",
        [
            {"dialog": [{"speaker": "usr", "text": "a"}, {"speaker": "sys", "text": "b", "strategy": "Question"}]},
            "{not json",
            {"no_dialog": True},
            {
                "dialog": [
                    {"speaker": "usr", "text": "a"},
                    {"speaker": "bot", "text": "b"},
                    {"speaker": "sys", "text": "c", "strategy": "Juggling"},
                    {"speaker": "sys", "text": ""},
                    {"speaker": "sys", "text": "d"},
                ]
            },
        ],
    )
    loaded = load_esconv(path)
    assert len(loaded) == 2
    found = {(i.position, i.field, i.dropped) for i in loaded.issues}
    assert ("line 2", None, True) in found
    assert ("line 3", "dialog", True) in found
    assert ("line 4", "dialog[1].speaker", True) in found
    assert ("line 4", "dialog[2].strategy", False) in found  # unknown strategy: kept, reported
    assert ("line 4", "dialog[3].text", True) in found
    assert ("line 4", "dialog[4].strategy", False) in found  # supporter utterance without a strategy
    unknown = next(i for i in loaded.issues if i.field == "dialog[2].strategy")
    assert "Juggling" in str(unknown) and str(path) in str(unknown)
    assert loaded[1].strategies[1] == ("Juggling",)
    assert loaded[1].supporter_turns()[0].counts[Dimension.COGNITIVE] == 0


def test_strict_mode_raises_input_error_naming_the_place(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "test.jsonl", [{"dialog": [{"speaker": "usr", "text": "a"}]}, "[1, 2]"])
    with pytest.raises(InputError) as info:
        load_esconv(path, strict=True)
    assert info.value.location == f"{path}:line 2"


def test_missing_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_esconv(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match=r"missing ESConv file\(s\): train.jsonl"):
        load_esconv(tmp_path)
    with pytest.raises(InputError, match=r"expected a \.jsonl"):
        load_esconv(_jsonl(tmp_path / "x.txt", []))


def test_load_issue_formats_like_input_error() -> None:
    issue = LoadIssue("a.jsonl", "line 3", "dialog[0].speaker", "unknown speaker 'x'")
    assert str(issue.to_error()) == "a.jsonl:line 3: dialog[0].speaker: unknown speaker 'x'"


@needs_data
def test_real_esconv_counts_match_provenance() -> None:
    loaded = load_esconv(DATA / "esconv")
    assert loaded.ok, loaded.summary()
    assert len(loaded) == 1300
    assert sum(len(d.messages) for d in loaded) == 30392  # speaker turns after merging, as documented
    counts: dict[str, int] = {}
    for d in loaded:
        for labels in d.strategies:
            for s in labels or ():
                counts[s] = counts.get(s, 0) + 1
    assert counts["Question"] == 3801 and counts["Others"] == 3341 and counts["Information"] == 1215
    failed = load_esconv(DATA / "esconv" / "FailedESConv.json")
    assert failed.ok and len(failed) == 196
    # every seeker feedback score in the file (the file holds 987; PROVENANCE.md's 1,037 is off)
    assert sum(len(d.metadata["feedback"]) for d in failed) == 987


@needs_data
def test_real_mint_and_lend_an_ear() -> None:
    convs = load_mint_conversations(DATA / "mint_lend_an_ear" / "training" / "conversations_322.json")
    assert len(convs) == 322
    # a handful of logged messages are empty: each is reported, none silently skipped
    assert convs.issues and all(i.field and i.field.endswith(".content") and i.dropped for i in convs.issues)
    lae = load_lend_an_ear(DATA / "mint_lend_an_ear")
    assert len(lae) == 50 and lae.ok, lae.summary()
    first = lae[0]
    assert first.messages[0].role == "user"
    assert set(first.metadata["expert_ratings"]) == {"expert1", "expert2", "expert3"}
    labelled = [t for d in lae for t in d.supporter_turns() if t.labelled]
    assert len(labelled) == 315
    judged = load_judged_turns(
        DATA / "mint_lend_an_ear" / "judged_turns" / "judged_turn_responses_gold_and_qwen3-4b_systems.jsonl"
    )
    assert len(judged) == 3780 and judged.ok
    by_id = {d.id: d for d in lae}
    for response in judged:
        assert by_id[response.conversation_id].messages[response.turn_index].role == "assistant"


@needs_data
def test_real_sage_profiles_and_rollouts() -> None:
    profiles = load_sage_profiles(DATA / "sage_rlver" / "profiles" / "simulator_profile_withfirsttalk.jsonl")
    assert len(profiles) == 100 and profiles.ok
    rollouts = load_sage_rollouts(DATA / "sage_rlver" / "results_deepseek-v3-simulator" / "gpt-4.1_result.jsonl")
    assert len(rollouts) == 100 and rollouts.ok, rollouts.summary()
    r = rollouts[0]
    assert r.model == "gpt-4.1" and r.messages[0].role == "user"
    assert all(r.messages[i].role == "assistant" for i in (*r.deltas, *r.withheld))
    # without a test-read entry the test turns' emotion changes are withheld, not dropped silently
    withheld = sum(len(x.withheld) for x in rollouts)
    assert sum(len(x.deltas) for x in rollouts) + withheld == 848 and withheld > 0
