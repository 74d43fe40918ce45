"""The pairwise evaluator recipe: its groups from ESConv train, and one step's loss on a real (tiny) model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from care_lab.bench.contrast import family_texts
from care_lab.training.evaluator_pairwise import Group, _encode, _group_loss, build_groups

pytest.importorskip("peft")


def test_groups_are_esconv_train_turns_with_three_worse_replies_made_from_the_data(data_dir: Path) -> None:
    groups = build_groups(data_dir, 3)
    written = {text for texts in family_texts().values() for text in texts}
    assert len(groups) == 3
    for group in groups:
        real, other, cut, shuffled = group.replies
        assert group.kinds == ("real", "offcontext", "cut", "shuffled")
        assert real.startswith(cut) and len(cut.split()) < len(real.split())
        assert sorted(shuffled.split()) == sorted(real.split()) and shuffled != real
        assert other != real and not written & set(group.replies)
        assert len(json.loads(group.target)["scores"]) == len(group.rubric["criteria"])


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
