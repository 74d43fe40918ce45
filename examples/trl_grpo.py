"""GRPO on ESConv contexts with CARE rewards: `python examples/trl_grpo.py [POLICY] [STEPS]`.

POLICY is `tiny` (a random SmolLM2-shaped model, for a smoke run), `bundled` (SmolLM2-135M) or a
model directory. The judge is the bundled SmolLM2 on llama.cpp; swap in any backend spec. The
prompts are ESConv train contexts: training reads train data only, and the role check refuses
anything else (ESConv valid and test are selection data).
"""

import sys

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from care_lab.data import data_dir, load_esconv, require_trainable
from care_lab.training.models import resolve_model
from care_sdk import AdaptiveReward

policy, steps = (sys.argv[1:] + ["tiny", "2"][len(sys.argv) - 1 :])[:2]
train = data_dir() / "esconv" / "train.jsonl"
require_trainable(train, what="GRPO prompts")  # refuses selection, test and eval-only data
turns = [t for d in load_esconv(train).records for t in d.supporter_turns()]
dataset = Dataset.from_list([{"prompt": t.context_messages()[-6:]} for t in turns[:256]])
reward = AdaptiveReward.from_backend("default")  # e.g. "openai:my-judge@http://127.0.0.1:8000/v1"
args = GRPOConfig(
    output_dir="runs/trl_grpo",
    max_steps=int(steps),
    per_device_train_batch_size=8,
    num_generations=8,
    max_completion_length=48,
    logging_steps=1,
    report_to="none",
    save_strategy="no",
)
GRPOTrainer(model=str(resolve_model(policy)), reward_funcs=[reward], args=args, train_dataset=dataset).train()
print("rubric cache:", reward.generator.cache.stats)  # one rubric per context, reused by all 8 replies
