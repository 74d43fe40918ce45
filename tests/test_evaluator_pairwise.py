"""The pairwise evaluator recipe: its written negatives, its groups from ESConv train, and one step's loss on a
real (tiny) model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from care_lab.bench.contrast import family_texts
from care_lab.training.evaluator_pairwise import (
    DRAWN_WRITTEN,
    STAGES,
    Group,
    _encode,
    _group_loss,
    build_groups,
    written_replies,
)
from care_sdk.canaries import DEFAULT_CANARIES

pytest.importorskip("peft")


def _grams(text: str, n: int = 4) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def test_the_written_training_replies_share_no_four_word_run_with_the_benchmarks_texts() -> None:
    benchmark = [text for texts in family_texts().values() for text in texts]
    seen = set().union(*(_grams(text) for text in benchmark))
    written = written_replies()
    assert sorted(written) == sorted([*DRAWN_WRITTEN, "bare_question"])
    canaries = {c.text.lower() for c in DEFAULT_CANARIES}
    assert not canaries & {text.lower() for text in written["bare_question"]}
    for kind, texts in written.items():
        assert len(texts) >= 10, kind
        for text in texts:
            assert text.lower() not in {b.lower() for b in benchmark}, text
            assert not _grams(text) & seen, (kind, text)


def test_groups_are_esconv_train_turns_with_another_dialogues_reply_and_three_drawn_kinds(data_dir: Path) -> None:
    groups = build_groups(data_dir, 12)
    benchmark = {text for texts in family_texts().values() for text in texts}
    written = written_replies()
    assert len(groups) == 12
    drawn: set[str] = set()
    for group in groups:
        real, other, *worse = group.replies
        assert group.kinds[:2] == ("real", "offcontext") and len(set(group.kinds)) == 5
        assert other != real and not benchmark & set(group.replies)
        for kind, text in zip(group.kinds[2:], worse, strict=True):
            drawn.add(kind)
            if kind == "cut":
                assert real.startswith(text) and len(text.split()) < len(real.split())
            elif kind == "shuffled":
                assert sorted(text.split()) == sorted(real.split()) and text != real
            else:
                assert text in written[kind]
        assert len(json.loads(group.target)["scores"]) == len(group.rubric["criteria"])
    assert len(drawn) >= 5  # the kinds vary from group to group


def test_the_second_stage_adds_another_dialogues_reply_of_the_same_emotion_type(data_dir: Path) -> None:
    from care_lab.data.esconv import load_esconv

    emotions: dict[str, set[str]] = {}  # a reply's text -> the emotion types of the dialogues that hold it
    for dialogue in load_esconv(data_dir / "esconv" / "train.jsonl").records:
        for turn in dialogue.supporter_turns():
            emotions.setdefault(turn.reply, set()).add(dialogue.metadata["emotion_type"])
    first, second = build_groups(data_dir, 8), build_groups(data_dir, 8, STAGES[1])
    assert {g.replies[0] for g in first} != {g.replies[0] for g in second}  # another seed, other turns
    for group in second:
        assert group.kinds[:3] == ("real", "offcontext", "offcontext_same") and len(group.kinds) == 5
        real, other, same = (emotions[r] for r in group.replies[:3])
        assert len(set(group.replies[:3])) == 3
        assert real & same and other - real, (real, other, same)


def test_the_third_stage_adds_a_written_bare_question_to_every_group_and_draws_one_of_the_same_eight(
    data_dir: Path,
) -> None:
    second, third = build_groups(data_dir, 8, STAGES[1]), build_groups(data_dir, 8, STAGES[2])
    assert {g.replies[0] for g in second} != {g.replies[0] for g in third}  # another seed, other turns
    questions = written_replies()["bare_question"]
    for group in third:
        assert group.kinds[:3] == ("real", "offcontext", "offcontext_same") and group.kinds[-1] == "bare_question"
        assert len(group.kinds) == 5 and group.replies[-1] in questions
        assert group.kinds[3] in {"cut", "shuffled", *DRAWN_WRITTEN}


def test_a_step_reads_each_score_at_its_position_as_the_full_sequence_does() -> None:
    import torch
    from peft import LoraConfig, get_peft_model

    from care_lab.training._common import load_model
    from care_sdk.types import Rubric

    model, tokenizer, _ = load_model("tiny", "float32")
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"]))
    choices = [tokenizer.convert_tokens_to_ids(str(s)) for s in range(1, 6)]
    rubric = Rubric.uniform_fixed()
    group = Group(
        context=[{"role": "user", "content": "I lost my job and I feel useless."}],
        rubric=rubric.model_dump(mode="json"),
        replies=("That sounds so hard; what happened?", "Nice weather.", "That sounds", "hard; That so sounds"),
        target=json.dumps({"scores": {f"c{i + 1}": 3 for i in range(len(rubric.criteria))}}),
        kinds=("real", "offcontext", "cut", "shuffled"),
    )
    enc = _encode(group, tokenizer, choices)
    assert all(len(slots) == len(rubric.criteria) for slots in enc.slots)
    loss, stats = _group_loss(model, enc, choices, tokenizer.pad_token_id, group.kinds)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters() if p.requires_grad)
    # the shared prompt's cache gives the expected scores each whole sequence gives on its own
    with torch.no_grad():
        expected = []
        for ids, slots in zip(enc.ids, enc.slots, strict=True):
            logits = model(input_ids=torch.tensor([ids])).logits[0]
            probs = torch.softmax(logits[[s - 1 for s in slots]][:, choices], dim=-1)
            expected.append(probs @ torch.arange(1.0, 6.0))
    gaps = torch.stack([expected[0] - e for e in expected[1:]])
    assert stats["gap"] == pytest.approx(gaps.mean().item(), abs=1e-4)
    assert stats["gap_cut"] == pytest.approx(gaps[1].mean().item(), abs=1e-4)
