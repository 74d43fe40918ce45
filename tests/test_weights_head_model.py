"""The weights head on the real model: llama.cpp reads the states training read, `care train weights-head` fits
one end to end, and the default generator takes its weights from the shipped head."""

from __future__ import annotations

from pathlib import Path

import pytest

from care_lab.data import load_esconv
from care_sdk import RubricGenerator
from care_sdk.backends.llamacpp import LlamaCppBackend
from care_sdk.bundled.adapters import bundled_adapter
from care_sdk.bundled.addons import WeightsHeadReader
from care_sdk.bundled.weights_head import WeightsHead, bundled_weights_head
from care_sdk.errors import ConfigError
from care_sdk.rubric_checks import check_rubric
from care_sdk.types import Rubric

pytestmark = pytest.mark.slow


def test_llamacpp_reads_the_states_the_head_was_fitted_on(llama_backend: LlamaCppBackend, data_dir: Path) -> None:
    """llama.cpp (the quantised file, stopped after layer 15) against transformers (float32, dequantised)."""
    import torch

    from care_lab.training.weights_head import head_turns, transformers_states

    texts = [t.text for t in head_turns(data_dir / "esconv" / "test.jsonl", 4, use="select")[:6]]
    reference = transformers_states(texts, {"15": (15, "mean"), "14": (14, "mean")})
    read = torch.tensor(llama_backend.hidden_state_means(texts, 15))
    cosine = torch.nn.functional.cosine_similarity(read, reference["15"])
    assert cosine.min() > 0.9999, cosine
    off = (read - reference["15"]).norm(dim=1) / (read - reference["14"]).norm(dim=1)
    assert off.max() < 0.5, off  # layer 15, not its neighbour (adjacent layers differ little; measured at most 0.27)
    with pytest.raises(ConfigError, match="layer must be 1 to 30"):
        llama_backend.hidden_state_means(texts[:1], 31)


def test_transformers_reads_the_same_states_and_the_same_weights(
    llama_backend: LlamaCppBackend, data_dir: Path
) -> None:
    """The head on the transformers backend (the dequantised bundled model) and on llama.cpp."""
    import torch

    from care_lab.training.weights_head import head_turns, transformers_states
    from care_sdk.backends.hf import HFBackend

    texts = [t.text for t in head_turns(data_dir / "esconv" / "test.jsonl", 4, use="select")[:4]]
    hf = HFBackend.from_gguf(llama_backend.model_path)
    try:
        read = torch.tensor(hf.hidden_state_means(texts, 15))
        assert torch.allclose(read, transformers_states(texts, {"15": (15, "mean")})["15"], atol=1e-3)
        head = bundled_weights_head()
        assert head is not None
        contexts = [
            t.context_messages()
            for t in load_esconv(data_dir / "esconv" / "test.jsonl").records[1].supporter_turns()[:5]
        ]
        for a, b in zip(head.weights(contexts, hf), head.weights(contexts, llama_backend), strict=True):
            assert max(abs(a[d] - b[d]) for d in a) < 0.02, (a, b)
        reader = RubricGenerator(hf, weight_reader=WeightsHeadReader()).weight_reader
        assert isinstance(reader, WeightsHeadReader) and reader.head == head  # a backend that names no file is trusted
    finally:
        hf.close()


def test_care_train_weights_head_fits_a_head_the_generator_uses(
    data_dir: Path, tmp_path: Path, model_path: Path
) -> None:
    from care_sdk.cli import main

    for split, count in (("train", 12), ("valid", 4)):  # a slice of the real splits
        lines = (data_dir / "esconv" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()[:count]
        (tmp_path / "data" / "esconv").mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / "esconv" / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "head.yaml"
    config.write_text(
        f"output_dir: {tmp_path / 'out'}\ndata_dir: {tmp_path / 'data'}\npenalties: [0.1, 1.0]\nthreads: 1\n",
        encoding="utf-8",
    )
    assert main(["train", "weights-head", "--config", str(config)]) == 0
    head = WeightsHead.load(tmp_path / "out" / "generator_head.json")
    assert head.training["penalty"] in (0.1, 1.0) and set(head.training["valid_top_match_by_penalty"]) == {"0.1", "1"}
    assert head.training["train_turns"] > 100 and (tmp_path / "out" / "states-train.pt").is_file()
    again = main(["train", "weights-head", "--config", str(config)])  # the states are read back
    assert again == 0 and WeightsHead.load(tmp_path / "out" / "generator_head.json").coef == head.coef

    backend = LlamaCppBackend(model_path, adapter=bundled_adapter("generator"), n_ctx=2048)
    try:
        generator = RubricGenerator(backend, weight_reader=WeightsHeadReader(head))
        context = load_esconv(data_dir / "esconv" / "test.jsonl").records[0].supporter_turns()[2].context_messages()
        rubric = generator.generate(context)
        assert rubric.weights == pytest.approx(head.weights([context], backend)[0])
    finally:
        backend.close()


@pytest.fixture(scope="module")
def shipped() -> RubricGenerator:
    return RubricGenerator("default", weight_reader=WeightsHeadReader())


def test_the_weights_head_add_on_reads_the_weights_beside_the_decoded_criteria(
    shipped: RubricGenerator, data_dir: Path
) -> None:
    assert RubricGenerator(shipped.backend).weight_reader is None  # off unless asked for
    head = bundled_weights_head()
    assert head is not None and isinstance(shipped.weight_reader, WeightsHeadReader)
    assert shipped.weight_reader.head == head
    assert shipped.identity.endswith(f"|weights=head-{head.digest}")
    decoded = RubricGenerator(shipped.backend)
    dialogue = load_esconv(data_dir / "esconv" / "test.jsonl").records[5]
    contexts = [t.context_messages() for t in dialogue.supporter_turns()[:4]]
    pairs = list(zip(shipped.generate_batch(contexts), decoded.generate_batch(contexts), strict=True))
    for context, (headed, written) in zip(contexts, pairs, strict=True):
        assert isinstance(headed, Rubric) and isinstance(written, Rubric), (headed, written)
        assert headed.criteria == written.criteria  # one decoded reply; only its weights come from the head
        assert headed.weights == pytest.approx(head.weights([context], shipped.backend)[0])
        assert not check_rubric(headed, []).near_uniform
