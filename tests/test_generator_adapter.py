"""The GGUF LoRA adapter path: export from PEFT (one adapter or several stacked) and import back, llama.cpp against
transformers, training from the shipped adapter, the bundled generator."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from care_lab.data import load_esconv
from care_sdk import Message, RubricEvaluator, RubricGenerator
from care_sdk.backends.llamacpp import LlamaCppBackend, open_llama
from care_sdk.backends.lora import read_adapter
from care_sdk.bundled.adapters import bundled_adapter
from care_sdk.bundled.addons import ExpectedWeightsReader, WeightsHeadReader
from care_sdk.errors import ConfigError
from care_sdk.prompts import GENERATOR_PROMPT_VERSION
from care_sdk.rubric_checks import check_rubric
from care_sdk.types import Dimension, Rubric

pytestmark = pytest.mark.slow

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def random_lora(model_dir: Path, config: Any, *, scale: float, seed: int) -> Any:
    """A PEFT LoRA on the model in ``model_dir`` with random ``lora_B`` factors (PEFT starts them at 0)."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn_like(param) * scale)
    return model


@pytest.fixture(scope="module")
def random_adapter(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A PEFT LoRA with random ``lora_B`` factors (PEFT starts them at 0) on the top 3 layers of the bundled
    model, and its merged model."""
    from peft import LoraConfig
    from transformers import AutoTokenizer

    from care_lab.training.models import bundled_model_dir

    out = tmp_path_factory.mktemp("adapter")
    base = bundled_model_dir()
    config = LoraConfig(r=4, lora_alpha=8, target_modules=MODULES, layers_to_transform=[27, 28, 29])
    peft_model = random_lora(base, config, scale=0.3, seed=0)
    peft_model.save_pretrained(out / "adapter")
    merged = peft_model.merge_and_unload()
    merged.save_pretrained(out / "merged")
    AutoTokenizer.from_pretrained(base).save_pretrained(out / "merged")
    return out / "adapter", out / "merged"


def _export(adapter: Path, out: Path, prompt_version: str = GENERATOR_PROMPT_VERSION) -> Path:
    return _export_many([adapter], out, prompt_version)


def _export_many(adapters: list[Path], out: Path, prompt_version: str = GENERATOR_PROMPT_VERSION) -> Path:
    from care_lab.training.export_adapter import export_lora_gguf
    from care_sdk.backends.llamacpp import default_model_path

    return export_lora_gguf(
        adapters if len(adapters) > 1 else adapters[0],
        out,
        base_gguf=default_model_path(),
        role="generator",
        prompt_version=prompt_version,
        max_context_messages=4,
        training={"note": "random factors"},
    )


TEXT = "<|im_start|>user\nI lost my job today and I feel awful.<|im_end|>\n<|im_start|>assistant\n"


def _ids() -> Any:
    from transformers import AutoTokenizer

    from care_lab.training.models import bundled_model_dir

    return AutoTokenizer.from_pretrained(bundled_model_dir())(TEXT, return_tensors="pt").input_ids


def transformers_logits(model: Any) -> Any:
    """Logits of TEXT from a transformers model, or from the directory of one (a PEFT adapter is merged)."""
    import torch
    from transformers import AutoModelForCausalLM

    if not hasattr(model, "forward"):
        model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    with torch.no_grad():
        return model(_ids()).logits[0].numpy()


def llama_logits(model_path: Path, lora: Path | None) -> Any:
    import numpy as np

    ids = _ids()
    kwargs = {"lora_path": str(lora)} if lora else {}
    llm = open_llama(model_path, n_ctx=256, logits_all=True, verbose=False, **kwargs)
    llm.eval(ids[0].tolist())
    scores = np.array(llm.scores[: ids.shape[1]])
    llm.close()
    return scores


def same_change(hf: Any, hf_base: Any, ll: Any, ll_base: Any) -> None:
    """What an adapter changes is the same in both runtimes (quantised activations make the rest differ)."""
    import numpy as np

    delta = np.corrcoef((hf - hf_base).ravel(), (ll - ll_base).ravel())[0, 1]
    assert delta > 0.95, delta
    assert (hf.argmax(-1) == ll.argmax(-1)).mean() >= 0.9
    assert (hf.argmax(-1) != ll_base.argmax(-1)).any()  # the adapter does change the model


def test_llamacpp_with_the_exported_adapter_matches_the_merged_transformers_model(
    random_adapter: tuple[Path, Path], tmp_path: Path, model_path: Path
) -> None:
    from care_lab.training.models import bundled_model_dir

    adapter_dir, merged_dir = random_adapter
    gguf = _export(adapter_dir, tmp_path / "a.gguf")
    info = read_adapter(gguf)
    assert (info.role, info.prompt_version, info.max_context_messages) == ("generator", GENERATOR_PROMPT_VERSION, 4)
    same_change(
        transformers_logits(merged_dir),
        transformers_logits(bundled_model_dir()),
        llama_logits(model_path, gguf),
        llama_logits(model_path, None),
    )


def _merged(adapter: Path) -> Any:
    import torch
    from peft import AutoPeftModelForCausalLM

    return AutoPeftModelForCausalLM.from_pretrained(str(adapter), dtype=torch.float32).merge_and_unload()


def test_import_undoes_the_export(random_adapter: tuple[Path, Path], tmp_path: Path) -> None:
    import json

    import numpy as np
    from safetensors.numpy import load_file

    from care_lab.training.export_adapter import import_lora_gguf

    adapter_dir, merged_dir = random_adapter
    imported = import_lora_gguf(_export(adapter_dir, tmp_path / "a.gguf"), tmp_path / "imported")
    original, back = (
        load_file(str(adapter_dir / "adapter_model.safetensors")),
        load_file(str(imported / "adapter_model.safetensors")),
    )
    assert original.keys() == back.keys() and len(original) == 2 * 7 * 3
    for key, value in original.items():  # fp16 in the file; the query and key rows back in transformers' order
        np.testing.assert_allclose(back[key], value, rtol=2e-3, atol=2e-4, err_msg=key)
    records = json.loads((imported / "care_adapter.json").read_text())
    assert (records["role"], records["max_context_messages"]) == ("generator", 4)
    np.testing.assert_allclose(transformers_logits(_merged(imported)), transformers_logits(merged_dir), atol=5e-3)


def test_adapters_trained_one_on_another_export_as_their_sum(
    random_adapter: tuple[Path, Path], tmp_path: Path, model_path: Path
) -> None:
    """A second LoRA (other rank, layers and modules) trained on the merged first one, as pref-GRPO on SFT."""
    import numpy as np
    from gguf import GGUFReader
    from peft import LoraConfig

    from care_lab.training.export_adapter import import_lora_gguf
    from care_lab.training.models import bundled_model_dir

    first, first_merged = random_adapter
    config = LoraConfig(
        r=2, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"], layers_to_transform=[20, 29]
    )
    second = random_lora(first_merged, config, scale=0.2, seed=1)
    second.save_pretrained(tmp_path / "second")
    both = transformers_logits(second.merge_and_unload())
    gguf = _export_many([first, tmp_path / "second"], tmp_path / "both.gguf")
    assert not np.allclose(both, transformers_logits(first_merged), atol=1e-2)  # the second one matters
    same_change(
        both, transformers_logits(bundled_model_dir()), llama_logits(model_path, gguf), llama_logits(model_path, None)
    )
    # read back: one adapter with each module's rank (4, 4 + 2, or 2) that gives the same model
    imported = import_lora_gguf(gguf, tmp_path / "imported")
    np.testing.assert_allclose(transformers_logits(_merged(imported)), both, atol=5e-3)
    # and written again (each module at its own rank), the same file
    tensors = [
        {t.name: np.array(t.data) for t in GGUFReader(str(f)).tensors}
        for f in (gguf, _export(imported, tmp_path / "again.gguf"))
    ]
    assert tensors[0].keys() == tensors[1].keys()
    for name, value in tensors[0].items():
        np.testing.assert_allclose(tensors[1][name], value, rtol=1e-3, atol=1e-5, err_msg=name)


def test_recipes_start_from_the_shipped_generator(model_path: Path) -> None:
    from care_lab.training._common import load_model
    from care_lab.training.models import bundled_model_dir, resolve_model

    path = resolve_model("bundled:generator")
    assert (path / "adapter_config.json").is_file() and resolve_model("bundled:generator") == path  # cached
    model, _, _ = load_model("bundled:generator", "float32")
    shipped = bundled_adapter("generator")
    same_change(
        transformers_logits(model),
        transformers_logits(bundled_model_dir()),
        llama_logits(model_path, shipped),
        llama_logits(model_path, None),
    )
    with pytest.raises(ConfigError, match="ships no critic adapter"):
        resolve_model("bundled:critic")


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


def test_expected_weights_are_read_beside_the_decoded_criteria(shipped: RubricGenerator, data_dir: Path) -> None:
    expected = RubricGenerator(shipped.backend, weight_reader=ExpectedWeightsReader())
    assert expected.identity.endswith("|weights=expected")
    decoded = RubricGenerator(shipped.backend)
    dialogue = load_esconv(data_dir / "esconv" / "test.jsonl").records[5]
    contexts = [t.context_messages() for t in dialogue.supporter_turns()[:4]]
    pairs = list(zip(expected.generate_batch(contexts), decoded.generate_batch(contexts), strict=True))
    for read, written in pairs:
        assert isinstance(read, Rubric) and isinstance(written, Rubric), (read, written)
        assert read.criteria == written.criteria  # one decoded reply; only its weights are read again
        assert abs(sum(read.weights.values()) - 1) < 1e-6
        assert not check_rubric(read, []).near_uniform
        assert all(abs(10 * w - round(10 * w)) < 1e-9 for w in written.weights.values())  # integers of 10
    assert any(abs(10 * w - round(10 * w)) > 1e-3 for e, _ in pairs for w in e.weights.values())  # type: ignore[union-attr]


def test_the_weights_head_add_on_gives_an_early_and_a_late_turn_different_weights(
    shipped: RubricGenerator, data_dir: Path
) -> None:
    headed = RubricGenerator(shipped.backend, weight_reader=WeightsHeadReader())  # the opt-in add-on measured here
    dialogues = load_esconv(data_dir / "esconv" / "test.jsonl").records[:6]
    for dialogue in dialogues:
        turns = dialogue.supporter_turns()
        early, late = headed.generate_batch([turns[1].context_messages(), turns[-1].context_messages()])
        assert not isinstance(early, Exception) and not isinstance(late, Exception)
        moved = sum(abs(early.weights[d] - late.weights[d]) for d in early.weights)
        # the weights head is deterministic; measured on these 6 dialogues: from the second reply to the
        # last, cognitive falls (0.32-0.58 -> 0.12-0.26) and proactive rises (0.04-0.15 -> 0.26-0.42) in
        # every one, the weights moving by 0.29-0.93 in all (sum of absolute differences)
        assert early.weights[Dimension.COGNITIVE] > late.weights[Dimension.COGNITIVE], dialogue.id
        assert early.weights[Dimension.PROACTIVE] < late.weights[Dimension.PROACTIVE], dialogue.id
        assert moved > 0.2, (dialogue.id, early.weights, late.weights)


def test_pref_grpo_from_the_shipped_generator_exports_as_one_adapter(
    small_build_data: Callable[[int], Path], tmp_path: Path, model_path: Path
) -> None:
    """A real pref-GRPO step on top of the shipped adapter, then ``care train export-adapter``: the GGUF holds
    both adapters (the shipped one's rank 16 and the step's rank 4 side by side where both adapt a module) and
    llama.cpp with it changes the model as the merged result of the run does."""
    import gguf
    import yaml

    from care_lab.training.config import PrefGRPOConfig
    from care_lab.training.models import bundled_model_dir
    from care_lab.training.pref_grpo import run_pref_grpo
    from care_sdk.cli import main
    from care_sdk.testing import ScriptedBackend, evaluation_json

    settings = {
        "data": str(small_build_data(3) / "pairs" / "train.jsonl"),
        "model": "bundled:generator",
        "output_dir": str(tmp_path / "grpo"),
        "evaluator": "unused",
        "max_examples": 2,
        "max_context_messages": 4,
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": MODULES, "layers_to_transform": [28, 29]},
        "trl": {
            "max_steps": 1,
            "num_generations": 2,
            "per_device_train_batch_size": 2,
            "max_completion_length": 16,
            "learning_rate": 5e-2,
        },
    }
    evaluator = RubricEvaluator(ScriptedBackend(lambda request: evaluation_json([4] * 6)), max_attempts=1)
    run_pref_grpo(PrefGRPOConfig(**settings), evaluator=evaluator, log=lambda s: None)
    config = tmp_path / "grpo.yaml"
    config.write_text(yaml.safe_dump(settings))
    assert main(["train", "export-adapter", "--config", str(config)]) == 0
    exported = tmp_path / "grpo" / "generator.gguf"
    info = read_adapter(exported)
    assert info.role == "generator" and info.training["start"] == "bundled:generator"
    ranks = {t.name: int(t.data.shape[0]) for t in gguf.GGUFReader(str(exported)).tensors if t.name.endswith("lora_a")}
    assert ranks["blk.22.attn_q.weight.lora_a"] == 16 and ranks["blk.29.attn_q.weight.lora_a"] == 20
    same_change(
        transformers_logits(tmp_path / "grpo" / "merged"),
        transformers_logits(bundled_model_dir()),
        llama_logits(model_path, exported),
        llama_logits(model_path, None),
    )
    rubric = RubricGenerator(LlamaCppBackend(model_path, adapter=exported, n_ctx=2048)).generate(
        [Message(role="user", content="I lost my job today and I feel awful.")]
    )
    assert abs(sum(rubric.weights.values()) - 1) < 1e-6
