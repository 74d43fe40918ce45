"""The GGUF LoRA adapter path: export from PEFT, llama.cpp against transformers, the bundled generator."""

from __future__ import annotations

from pathlib import Path

import pytest

from care_sdk import RubricGenerator
from care_sdk.adapters import bundled_adapter, read_adapter
from care_sdk.backends.llamacpp import LlamaCppBackend, open_llama
from care_sdk.data import load_esconv
from care_sdk.errors import ConfigError
from care_sdk.prompts import GENERATOR_PROMPT_VERSION
from care_sdk.rubric_checks import check_rubric
from care_sdk.types import Dimension

pytestmark = pytest.mark.slow

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def random_adapter(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A PEFT LoRA with random ``lora_B`` factors (PEFT starts them at 0) on the top 3 layers of the bundled
    model, and its merged model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from care_sdk.training.models import bundled_model_dir

    out = tmp_path_factory.mktemp("adapter")
    torch.manual_seed(0)
    base = bundled_model_dir()
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=MODULES, layers_to_transform=[27, 28, 29])
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn_like(param) * 0.3)
    peft_model.save_pretrained(out / "adapter")
    merged = peft_model.merge_and_unload()
    merged.save_pretrained(out / "merged")
    AutoTokenizer.from_pretrained(base).save_pretrained(out / "merged")
    return out / "adapter", out / "merged"


def _export(adapter: Path, out: Path, prompt_version: str = GENERATOR_PROMPT_VERSION) -> Path:
    from care_sdk.backends.llamacpp import default_model_path
    from care_sdk.training.export_adapter import export_lora_gguf

    return export_lora_gguf(
        adapter,
        out,
        base_gguf=default_model_path(),
        role="generator",
        prompt_version=prompt_version,
        max_context_messages=4,
        training={"note": "random factors"},
    )


def test_llamacpp_with_the_exported_adapter_matches_the_merged_transformers_model(
    random_adapter: tuple[Path, Path], tmp_path: Path, model_path: Path
) -> None:
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from care_sdk.training.models import bundled_model_dir

    adapter_dir, merged_dir = random_adapter
    gguf = _export(adapter_dir, tmp_path / "a.gguf")
    info = read_adapter(gguf)
    assert (info.role, info.prompt_version, info.max_context_messages) == ("generator", GENERATOR_PROMPT_VERSION, 4)
    tokenizer = AutoTokenizer.from_pretrained(merged_dir)
    text = "<|im_start|>user\nI lost my job today and I feel awful.<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text, return_tensors="pt").input_ids

    def transformers_logits(path: Path) -> np.ndarray:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        with torch.no_grad():
            return model(ids).logits[0].numpy()

    def llama_logits(lora: Path | None) -> np.ndarray:
        kwargs = {"lora_path": str(lora)} if lora else {}
        llm = open_llama(model_path, n_ctx=256, logits_all=True, verbose=False, **kwargs)
        llm.eval(ids[0].tolist())
        scores = np.array(llm.scores[: ids.shape[1]])
        llm.close()
        return scores

    hf_merged, hf_base = transformers_logits(merged_dir), transformers_logits(bundled_model_dir())
    ll_adapter, ll_base = llama_logits(gguf), llama_logits(None)
    # what the adapter changes, the same in both runtimes (quantised activations make the rest differ slightly)
    delta = np.corrcoef((hf_merged - hf_base).ravel(), (ll_adapter - ll_base).ravel())[0, 1]
    assert delta > 0.95, delta
    assert (hf_merged.argmax(-1) == ll_adapter.argmax(-1)).mean() >= 0.9
    assert (hf_merged.argmax(-1) != ll_base.argmax(-1)).any()  # the adapter does change the model


def test_an_adapter_of_another_prompt_version_is_refused(
    random_adapter: tuple[Path, Path], tmp_path: Path, model_path: Path
) -> None:
    gguf = _export(random_adapter[0], tmp_path / "old.gguf", prompt_version="v1")
    backend = LlamaCppBackend(model_path, adapter=gguf, n_ctx=512)
    with pytest.raises(ConfigError, match=f"prompt v1, but this version of care-sdk uses {GENERATOR_PROMPT_VERSION}"):
        RubricGenerator(backend)
    backend.close()


def test_a_generator_adapter_cannot_serve_as_the_evaluator(
    random_adapter: tuple[Path, Path], tmp_path: Path, model_path: Path
) -> None:
    from care_sdk import RubricEvaluator

    backend = LlamaCppBackend(model_path, adapter=_export(random_adapter[0], tmp_path / "g.gguf"), n_ctx=512)
    with pytest.raises(ConfigError, match="a generator adapter cannot serve as the evaluator"):
        RubricEvaluator(backend)
    backend.close()


def test_a_file_that_is_no_adapter_is_refused(model_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a LoRA adapter"):
        read_adapter(model_path)


@pytest.fixture(scope="module")
def shipped() -> RubricGenerator:
    path = bundled_adapter("generator")
    assert path is not None, "the package ships no generator adapter"
    return RubricGenerator("default")


def test_the_default_generator_is_the_shipped_adapter(shipped: RubricGenerator) -> None:
    adapter = shipped.backend.adapter  # type: ignore[attr-defined]
    assert adapter.role == "generator" and adapter.prompt_version == GENERATOR_PROMPT_VERSION
    assert shipped.max_context_messages == adapter.max_context_messages
    assert "generator.gguf" in shipped.identity
    assert RubricGenerator("base").backend.adapter is None  # type: ignore[attr-defined]


def test_shipped_rubrics_on_held_out_dialogues_are_valid_and_sane(shipped: RubricGenerator, data_dir: Path) -> None:
    dialogue = load_esconv(data_dir / "esconv" / "test.jsonl").records[3]
    turns = [t for t in dialogue.supporter_turns() if t.labelled][:8]
    rubrics = shipped.generate_batch([t.context_messages() for t in turns])
    grounded = 0
    for turn, rubric in zip(turns, rubrics, strict=True):
        assert not isinstance(rubric, Exception), rubric
        check = check_rubric(rubric, turn.context[-4:])
        assert not (check.copied_criteria or check.placeholder_criteria or check.repeated_phrase_criteria)
        assert not check.duplicate and not check.near_uniform
        grounded += check.grounded
    assert grounded >= len(turns) // 2


def test_an_early_and_a_late_turn_get_different_weights(shipped: RubricGenerator, data_dir: Path) -> None:
    dialogues = load_esconv(data_dir / "esconv" / "test.jsonl").records[:6]
    differ = early_cognitive = 0
    for dialogue in dialogues:
        turns = dialogue.supporter_turns()
        early, late = shipped.generate_batch([turns[1].context_messages(), turns[-1].context_messages()])
        assert not isinstance(early, Exception) and not isinstance(late, Exception)
        differ += early.top_dimension != late.top_dimension
        early_cognitive += early.top_dimension is Dimension.COGNITIVE
    # greedy, so stable; measured on these 6 dialogues: the last reply's top dimension differs from
    # the second reply's in 5, and the second reply is cognitive in 5 (ESConv's mostly are)
    assert differ >= 5 and early_cognitive >= 3, (early_cognitive, differ)
