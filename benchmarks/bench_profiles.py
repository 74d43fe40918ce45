"""A reward call with and without a user profile on the same dialogue, and a GRPO step with a profile column.

Context: the first supporter turn with at least three messages before it in the first dialogue of
ESConv ``train`` that has one, judged with the supporter's real reply; the profile is written here
(ESConv has none). The judge is the bundled SmolLM2 base on llama.cpp (spec ``base``: no adapter,
so it reads profiles; the bundled ``default`` adapters drop them, which the script also shows).

It prints, for that context without and with the profile: the unified diff of the generator's and
the evaluator's prompts, the two rubric cache keys (and the ``default`` generator's, equal with and
without: it drops the profile), the two rewards and the rubrics' criteria. Then it runs one real TRL
GRPO step on a tiny random policy over two ESConv ``train`` contexts (the same kind of turn in the
first two such dialogues) whose dataset has a
``profile`` column, recording every rubric request, and counts the rubric prompts that quote their
row's profile.

Usage:
    python benchmarks/bench_profiles.py [--data-dir ../shared/data] [--threads 1] [--no-grpo]

Writes ``benchmarks/results/profiles.json``.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from care_lab.data import data_dir, load_esconv, require_trainable
from care_lab.data.results import write_results
from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator
from care_sdk.backends import RUBRIC, resolve_backend
from care_sdk.profiles import UserProfile
from care_sdk.testing import RecordingBackend

DEFAULT_OUT = Path(__file__).parent / "results" / "profiles.json"
PROFILES = [
    UserProfile(
        text="A 34-year-old who cares for her mother with dementia and works nights.",
        traits=("self-critical", "avoids asking for help"),
        history="Has talked before about feeling she neglects her own health.",
    ),
    UserProfile(text="A first-year student far from home who is shy with strangers."),
]


def rendered(messages: Any) -> list[str]:
    """A request's chat messages as lines, each message under its role."""
    return [line for m in messages for line in (f"[{m.role}]", *m.content.splitlines())]


def diff(before: Any, after: Any, name: str) -> list[str]:
    return list(
        difflib.unified_diff(
            rendered(before.messages),
            rendered(after.messages),
            f"{name} (no profile)",
            f"{name} (profile)",
            lineterm="",
        )
    )


def grpo_step(rows: list[dict[str, Any]], backend: Any) -> dict[str, Any]:
    """One GRPO step (one prompt x two generations per row) on a tiny random SmolLM2-shaped policy."""
    from care_lab.training.models import tiny_grpo_trainer

    recorder = RecordingBackend(backend)
    reward = AdaptiveReward(RubricGenerator(recorder, check_criteria=False), RubricEvaluator(backend))
    with tempfile.TemporaryDirectory() as out:
        # the learning rate TRL's config defaults to: the step only has to reach the reward
        trainer = tiny_grpo_trainer(
            reward, rows, out, max_steps=1, generations=2, completion_tokens=12, learning_rate=1e-6
        )
        trainer.train()
    prompts = [str(r.messages[-1].content) for r in recorder.requests if r.purpose == RUBRIC]
    quoted = 0
    for prompt in prompts:  # each rubric prompt must quote its own row's profile, and only it
        own = [row["profile"] for row in rows if row["prompt"][-1]["content"].strip() in prompt]
        quoted += len(own) == 1 and UserProfile.model_validate(own[0]).render() in prompt
    step = next(h for h in trainer.state.log_history if "rewards/care_reward/mean" in h)
    return {
        "rubric_requests": len(prompts),
        "rubric_prompts_quoting_their_profile": quoted,
        "reward_mean": step["rewards/care_reward/mean"],
        "care_failed": step.get("care/failed"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", help="the data directory (default: $CARE_DATA_DIR)")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads (default: %(default)s)")
    parser.add_argument("--no-grpo", action="store_true", help="skip the GRPO step")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    train = data_dir(args.data_dir) / "esconv" / "train.jsonl"
    require_trainable(train, what="GRPO prompts")  # the GRPO step trains on these contexts
    firsts = (next((t for t in d.supporter_turns() if len(t.context) >= 3), None) for d in load_esconv(train).records)
    turns = [t for t in firsts if t is not None][: len(PROFILES)]  # one context per dialogue
    turn = turns[0]
    context, reply = turn.context_messages(), turn.reply
    started = time.perf_counter()

    base = resolve_backend("base", n_threads=args.threads)
    reward = AdaptiveReward(RubricGenerator(base), RubricEvaluator(base))
    assert reward.generator is not None
    profile = PROFILES[0]
    generator_diff = diff(reward.generator.request(context), reward.generator.request(context, profile), "generator")
    without, with_profile = reward.score(context, reply), reward.score(context, reply, profile=profile)
    assert without.rubric is not None and with_profile.rubric is not None
    evaluator_diff = diff(
        reward.evaluator.request(context, without.rubric, reply),
        reward.evaluator.request(context, without.rubric, reply, profile),
        "evaluator",
    )
    keys = {"without": reward.generator.cache_key(context), "with": reward.generator.cache_key(context, profile)}
    bundled = RubricGenerator(resolve_backend("default", role="generator", n_threads=args.threads))
    bundled_keys = {"without": bundled.cache_key(context), "with": bundled.cache_key(context, profile)}

    print("\n".join(generator_diff), "\n")
    print("\n".join(evaluator_diff), "\n")
    print(f"rubric cache key, no profile:   {keys['without']}")
    print(f"rubric cache key, with profile: {keys['with']}")
    print(f"bundled default generator (drops profiles): equal keys = {bundled_keys['with'] == bundled_keys['without']}")
    print(f"rubrics cached: {len(reward.generator.cache)}")  # type: ignore[arg-type]
    for name, result in (("no profile", without), ("with profile", with_profile)):
        assert result.rubric is not None
        print(f"\nreward ({name}): {result.reward:.3f}")
        print("\n".join(f"  {c.dimension.value:<9} {c.text}" for c in result.rubric.criteria))

    grpo: dict[str, Any] | None = None
    if not args.no_grpo:
        rows = [
            {"prompt": t.context_messages(), "profile": p.model_dump(mode="json")}
            for t, p in zip(turns, PROFILES, strict=True)
        ]
        grpo = grpo_step(rows, base)
        print(f"\nGRPO step: {grpo}")

    command = "python benchmarks/bench_profiles.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = write_results(
        args.out,
        command.strip(),
        data="esconv/train.jsonl",
        role="train",
        test_reads=0,
        metrics={
            "cache_keys": keys,
            "bundled_default_drops_profile": bundled_keys["with"] == bundled_keys["without"],
            "rewards": {"without": without.reward, "with": with_profile.reward},
            "criteria": {
                "without": [c.text for c in without.rubric.criteria],
                "with": [c.text for c in with_profile.rubric.criteria],
            },
            "prompt_diff_lines": {
                "generator": sum(line[:1] in "+-" and line[:3] not in ("+++", "---") for line in generator_diff),
                "evaluator": sum(line[:1] in "+-" and line[:3] not in ("+++", "---") for line in evaluator_diff),
            },
            "grpo_step": grpo,
        },
        baselines={"without_profile_reward": without.reward},
        extra={
            "judge": "base (bundled SmolLM2-135M-Instruct on llama.cpp, no adapter)",
            "context": {"dialogue_turn": turn.index, "messages": len(context)},
            "profiles": [p.model_dump(mode="json") for p in PROFILES],
            "generator_diff": generator_diff,
            "evaluator_diff": evaluator_diff,
            "seconds": round(time.perf_counter() - started, 1),
        },
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
