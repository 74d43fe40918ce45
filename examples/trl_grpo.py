"""GRPO with CARE rewards on your dialogues: `python examples/trl_grpo.py [DIALOGUES] [POLICY] [STEPS]`.

DIALOGUES is a JSONL file of logged dialogues, one `{"id": ..., "messages": [...]}` a line
(default: `dialogues.jsonl` beside this file); the context of every assistant turn becomes a
prompt. POLICY is a transformers model directory (default: the bundled SmolLM2-135M-Instruct,
converted once from its GGUF). STEPS defaults to 2. The judge is `$CARE_BACKEND`, any backend spec
(default: the bundled SmolLM2 on llama.cpp). Needs `pip install "care-sdk[llamacpp,hf]" trl datasets`.
"""

import os
import sys
from pathlib import Path

import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from care_sdk import AdaptiveReward
from care_sdk.backends.hf import cache_gguf
from care_sdk.backends.llamacpp import default_model_path
from care_sdk.dialogues import read_dialogues

args = sys.argv[1:]
dialogues = Path(args[0]) if args else Path(__file__).with_name("dialogues.jsonl")
policy = args[1] if len(args) > 1 else str(cache_gguf(default_model_path()))
steps = int(args[2]) if len(args) > 2 else 2

lines = list(read_dialogues(dialogues))
for line in lines:
    if line.error is not None:
        sys.exit(f"{line.error}")  # the file, line, field and reason
prompts = [
    [{"role": m.role, "content": m.content} for m in turn.context[-6:]]
    for line in lines
    if line.dialogue is not None
    for turn in line.dialogue.turns()
]
dataset = Dataset.from_list([{"prompt": p} for p in prompts])
reward = AdaptiveReward.from_backend(
    os.environ.get("CARE_BACKEND", "default")
)  # "openai:judge@http://127.0.0.1:8000/v1"
config = GRPOConfig(
    output_dir="runs/trl_grpo",
    max_steps=steps,
    per_device_train_batch_size=8,
    num_generations=8,
    max_completion_length=48,
    logging_steps=1,
    report_to="none",
    save_strategy="no",
    use_cpu=not torch.cuda.is_available(),
)
GRPOTrainer(model=policy, reward_funcs=[reward], args=config, train_dataset=dataset).train()
print("rubric cache:", reward.generator.cache.stats)  # one rubric per context, reused by all 8 replies
