"""Per-turn CARE rewards in verl's multi-turn token layout, with SmolLM2's real ChatML tokenizer.

verl is not installed here (its wheels pin their own torch). The layout is built as verl 0.9's agent
loop builds it (``verl/experimental/agent_loop``): the prompt chat-templated with the generation
prompt and left-padded; the response holds each generated assistant turn (its tokens and the
end-of-turn token, ``response_mask`` 1) and the templated observation turns between them
(``response_mask`` 0), right-padded. ``DataProto`` below copies the fields the reward loop
(``verl/experimental/reward_loop``) reads: ``batch``, ``non_tensor_batch`` and slicing.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from care_sdk import AdaptiveReward, TrajectoryReward  # noqa: E402
from care_sdk.backends.base import GenerationRequest  # noqa: E402
from care_sdk.errors import CareError, ConfigError, InputError  # noqa: E402
from care_sdk.integrations import verl_multiturn as vm  # noqa: E402
from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json, rubric_json  # noqa: E402

PROMPT_LENGTH, RESPONSE_LENGTH = 64, 96
USER = "My exam is tomorrow and I can't focus."


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    pytest.importorskip("trl", reason="the tiny model helper needs the train extra")
    from transformers import AutoTokenizer

    from care_lab.training.models import tiny_model_dir

    return AutoTokenizer.from_pretrained(tiny_model_dir(), local_files_only=True)


def scripted(scores: dict[str, list[int]] | None = None, broken: str | None = None) -> ScriptedBackend:
    def answer(request: GenerationRequest) -> str:
        if request.purpose == "rubric":
            return rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
        reply = candidate_reply(request)
        if reply == broken:
            return "no JSON here"
        return evaluation_json((scores or {}).get(reply, [5, 5, 5, 5, 1, 1]))

    return ScriptedBackend(answer)


def layout(tokenizer: Any, replies: list[str], users: list[str]) -> tuple[list[int], list[int], list[int]]:
    """One rollout as verl's agent loop lays it out: prompt ids, response ids, response mask."""
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be kind."}, {"role": "user", "content": USER}],
        add_generation_prompt=True,
        tokenize=False,
    )
    prompt = tokenizer.encode(text, add_special_tokens=False)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    response: list[int] = []
    mask: list[int] = []
    for i, reply in enumerate(replies):
        generated = [*tokenizer.encode(reply, add_special_tokens=False), end]
        response += generated
        mask += [1] * len(generated)
        if i + 1 < len(replies):
            observation = tokenizer.encode(
                f"\n<|im_start|>user\n{users[i]}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
            )
            response += observation
            mask += [0] * len(observation)
    return prompt, response, mask


def padded_batch(tokenizer: Any, rollouts: list[tuple[list[int], list[int], list[int]]]) -> dict[str, Any]:
    pad = tokenizer.pad_token_id
    prompts, responses, masks, attention = [], [], [], []
    for p, r, m in rollouts:
        prompts.append([pad] * (PROMPT_LENGTH - len(p)) + p)
        responses.append(r + [pad] * (RESPONSE_LENGTH - len(r)))
        masks.append(m + [0] * (RESPONSE_LENGTH - len(m)))
        attention.append([0] * (PROMPT_LENGTH - len(p)) + [1] * (len(p) + len(r)) + [0] * (RESPONSE_LENGTH - len(r)))
    return {
        "prompts": torch.tensor(prompts),
        "responses": torch.tensor(responses),
        "response_mask": torch.tensor(masks),
        "attention_mask": torch.tensor(attention),
    }


def test_turn_ends_are_the_last_generated_token_of_each_turn(tokenizer: Any) -> None:
    prompt, response, mask = layout(tokenizer, ["Let's plan tonight.", "One page at a time."], ["I'm so tired."])
    ends = vm.assistant_turn_ends(mask)
    assert len(ends) == 2 and ends[-1] == len(response) - 1
    assert [tokenizer.convert_ids_to_tokens(response[e]) for e in ends] == ["<|im_end|>", "<|im_end|>"]
    assert vm.assistant_mask(prompt, response, tokenizer) == mask  # rebuilt from the template alone
    whole = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be kind."}, {"role": "user", "content": USER},
         {"role": "assistant", "content": "Let's plan tonight."}, {"role": "user", "content": "I'm so tired."},
         {"role": "assistant", "content": "One page at a time."}],
        tokenize=False,
    )  # fmt: skip
    assert tokenizer.decode(prompt + response) == whole.rstrip("\n")  # the layout is the chat template's


def test_per_turn_rewards_land_on_each_turns_last_token(tokenizer: Any) -> None:
    rollouts = [
        layout(tokenizer, ["Let's plan tonight.", "One page at a time."], ["I'm so tired."]),
        layout(tokenizer, ["Whatever."], []),
    ]
    batch = padded_batch(tokenizer, rollouts)
    backend = scripted({"Whatever.": [1, 1, 1, 1, 1, 1], "One page at a time.": [3, 3, 3, 3, 3, 3]})
    rm_scores, extras = vm.turn_rewards_from_tokens(
        batch["prompts"],
        batch["responses"],
        tokenizer,
        response_mask=batch["response_mask"],
        attention_mask=batch["attention_mask"],
        reward=AdaptiveReward.from_backend(backend),
    )
    assert isinstance(rm_scores, torch.Tensor) and rm_scores.shape == batch["responses"].shape
    assert rm_scores.dtype == torch.float32
    ends = vm.assistant_turn_ends(batch["response_mask"][0])
    assert rm_scores[0, ends].tolist() == [0.75, 0.5] and rm_scores[0].count_nonzero() == 2
    assert rm_scores[1].tolist() == [0.0] * RESPONSE_LENGTH  # one turn scored 0, on its last token
    assert extras["care_turns"] == [2.0, 1.0] and extras["care_failed"] == [0.0, 0.0]
    assert [json.loads(t) for t in extras["care_turn_rewards"]] == [[0.75, 0.5], [0.0]]
    assert extras["score"] == [1.25, 0.0] and extras["care_weight_affective"] == [0.5, 0.5]
    # the second turn was judged against the whole dialogue before it, without the system prompt
    contexts = [r.messages[-1].content for r in backend.requests if r.purpose == "rubric"]
    assert any("I'm so tired." in c and "Let's plan tonight." in c for c in contexts)
    assert not any("Be kind." in c for c in contexts)


def test_without_response_mask_the_turns_are_found_from_the_template(tokenizer: Any) -> None:
    batch = padded_batch(tokenizer, [layout(tokenizer, ["Let's plan.", "Good."], ["I'm tired."])])
    with_mask, _ = vm.turn_rewards_from_tokens(
        batch["prompts"], batch["responses"], tokenizer, response_mask=batch["response_mask"],
        attention_mask=batch["attention_mask"], reward=AdaptiveReward.from_backend(scripted()),
    )  # fmt: skip
    without, _ = vm.turn_rewards_from_tokens(
        batch["prompts"], batch["responses"], tokenizer, attention_mask=batch["attention_mask"],
        reward=AdaptiveReward.from_backend(scripted()),
    )  # fmt: skip
    assert torch.equal(with_mask, without)


def test_eight_replies_to_one_context_cost_one_rubric_and_eight_evaluations(tokenizer: Any) -> None:
    batch = padded_batch(tokenizer, [layout(tokenizer, [f"Reply {i}: breathe."], []) for i in range(8)])
    backend = scripted()
    rm_scores, _ = vm.turn_rewards_from_tokens(
        batch["prompts"], batch["responses"], tokenizer, response_mask=batch["response_mask"],
        attention_mask=batch["attention_mask"], reward=AdaptiveReward.from_backend(backend),
    )  # fmt: skip
    assert rm_scores.sum(dim=1).tolist() == [0.75] * 8
    purposes = [r.purpose for r in backend.requests]
    assert purposes.count("rubric") == 1 and purposes.count("evaluation") == 8


@pytest.mark.parametrize("how", ["mean", "discounted", "last"])
def test_scaled_rows_sum_to_the_trajectory_reward(how: str) -> None:
    dialogue = [
        {"role": "user", "content": "I can't sleep."},
        {"role": "assistant", "content": "Since when?"},
        {"role": "user", "content": "Since the layoff."},
        {"role": "assistant", "content": "That is a lot."},
    ]
    scores = {"Since when?": [2, 2, 2, 2, 2, 2]}
    out = vm.score_turns_batch(
        [dialogue], [[4, 10]], 12, reward=AdaptiveReward.from_backend(scripted(scores)), how=how, gamma=0.5
    )[0]  # type: ignore[arg-type]
    episode = TrajectoryReward(AdaptiveReward.from_backend(scripted(scores)), how=how, gamma=0.5).score(dialogue)  # type: ignore[arg-type]
    assert out.score == pytest.approx(episode.reward)
    if how == "last":  # only the final turn is scored
        assert out.turn_ends == (10,) and out.token_rewards[4] == 0.0


def test_an_unscorable_turn_raises_or_is_marked_failed() -> None:
    dialogue = [{"role": "user", "content": "I failed."}, {"role": "assistant", "content": "Oops."}]
    with pytest.raises(CareError, match=r"verl sample 0, turn 0 \(response token 2\)"):
        vm.score_turns_batch([dialogue], [[2]], 4, reward=AdaptiveReward.from_backend(scripted(broken="Oops.")))
    out = vm.score_turns_batch(
        [dialogue], [[2]], 4, reward=AdaptiveReward.from_backend(scripted(broken="Oops.")), on_error=0.0
    )[0]
    assert out.turn_rewards == (None,) and out.extras["care_failed"] == 1.0 and math.isnan(out.extras["care_last_turn"])  # type: ignore[arg-type]


def test_bad_input_is_refused() -> None:
    dialogue = [{"role": "user", "content": "I failed."}, {"role": "assistant", "content": "Oh."}]
    reward = AdaptiveReward.from_backend(scripted())
    with pytest.raises(InputError, match="1 assistant turns but 2 turn ends"):
        vm.score_turns_batch([dialogue], [[1, 2]], 4, reward=reward)
    with pytest.raises(InputError, match="outside the response"):
        vm.score_turns_batch([dialogue], [[9]], 4, reward=reward)
    with pytest.raises(ConfigError):
        vm.score_turns_batch([dialogue], [[1]], 4, reward=reward, how="sum")  # type: ignore[arg-type]


# -- the reward manager, called the way verl 0.9's reward loop calls it --------------------------


@dataclass
class DataProto:
    """The fields of verl.protocol.DataProto the reward loop reads (``data[i:j]``, ``data[0]``)."""

    batch: dict[str, Any]
    non_tensor_batch: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(next(iter(self.batch.values())))

    def __getitem__(self, index: int | slice) -> Any:
        # a slice keeps a batch; an index gives one item, each non-tensor column's value for it
        return DataProto(
            {k: v[index] for k, v in self.batch.items()}, {k: v[index] for k, v in self.non_tensor_batch.items()}
        )


def test_reward_manager_places_turn_rewards_in_the_batch_reward_loop(tokenizer: Any) -> None:
    rollouts = [layout(tokenizer, ["Let's plan tonight.", "One page at a time."], ["I'm so tired."])] * 2
    data = DataProto(padded_batch(tokenizer, rollouts))

    class Manager(vm.CareTurnRewardManager):
        reward = AdaptiveReward.from_backend(scripted({"One page at a time.": [3, 3, 3, 3, 3, 3]}))

    manager = Manager(config=None, tokenizer=tokenizer, compute_score=None)
    # RewardLoopManager.compute_rm_score: run_single per row, then assemble_rm_scores on the batch
    outputs = [asyncio.run(manager.run_single(data[i : i + 1])) for i in range(len(data))]
    rm_scores = Manager.assemble_rm_scores(data, [o["reward_score"] for o in outputs])
    ends = vm.assistant_turn_ends(data.batch["response_mask"][0])
    assert rm_scores.shape == data.batch["responses"].shape
    assert rm_scores[0, ends].tolist() == [0.75, 0.5] and rm_scores.sum().item() == pytest.approx(2.5)
    assert outputs[0]["reward_extra_info"]["care_turns"] == 2.0


def test_reward_manager_in_the_streaming_agent_loop_returns_the_row_sum(tokenizer: Any) -> None:
    prompt, response, _ = layout(tokenizer, ["Let's plan tonight.", "One page at a time."], ["I'm so tired."])
    # AgentLoopWorker._compute_score: unpadded ids, attention all ones, no response_mask
    data = DataProto(
        {
            "prompts": torch.tensor([prompt]),
            "responses": torch.tensor([response]),
            "attention_mask": torch.ones(1, len(prompt) + len(response), dtype=torch.int64),
        }
    )

    class Manager(vm.CareTurnRewardManager):
        reward = AdaptiveReward.from_backend(scripted({"One page at a time.": [3, 3, 3, 3, 3, 3]}))
        how = "mean"

    out = asyncio.run(Manager(None, tokenizer, None).run_single(data))
    assert out["reward_score"] == pytest.approx(0.625)  # a number: verl puts it on the last token itself
    assert out["reward_extra_info"]["care_turn_rewards"] == "[0.75, 0.5]"


def test_reward_manager_judges_each_rollout_as_said_to_the_user_of_its_row(tokenizer: Any) -> None:
    from care_sdk.integrations.verl import make_row

    rollouts = [layout(tokenizer, ["Let's plan tonight.", "One page at a time."], ["I'm so tired."])] * 2
    profiles = [make_row("I'm behind.", profile={"traits": ["proud"]})["extra_info"], {}]
    data = DataProto(padded_batch(tokenizer, rollouts), {"extra_info": profiles})
    backend = scripted()

    class Manager(vm.CareTurnRewardManager):
        reward = AdaptiveReward.from_backend(backend)

    manager = Manager(config=None, tokenizer=tokenizer, compute_score=None)
    for i in range(len(data)):
        asyncio.run(manager.run_single(data[i : i + 1]))
    marked = ["Traits: proud" in r.messages[1].content for r in backend.requests]
    assert marked[:4].count(True) == 4 and not any(marked[4:])  # the first rollout's 2 turns x (rubric, evaluation)
    bad = DataProto(padded_batch(tokenizer, rollouts[:1]), {"extra_info": [{"profile": '{"traits": "x"}'}]})
    with pytest.raises(InputError, match=r"verl rollout: extra_info\['profile'\].traits"):
        asyncio.run(manager.run_single(bad))
