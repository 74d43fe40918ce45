"""``care train weights-head``: fit the generator's :class:`~care_sdk.bundled.weights_head.WeightsHead` on ESConv.

Every labelled supporter turn of ESConv **train** (a turn whose reference reply has mapped
strategies) is one example: the input is what the generator reads before the reply (the user
message of its prompt, cut to the last ``max_context_messages``), read as the mean of
``hidden_states[layer]`` of the base model over its tokens, beside the supporter-turn number
one-hot; the target is the reference reply's top dimension (a turn whose strategy counts tie
counts equally for each tied dimension). A multinomial logistic regression with an L2 penalty is
fitted by full-batch L-BFGS for each penalty of the config; the one whose top dimension matches
the most ESConv **valid** turns (:func:`~care_sdk.rubric_checks.top_match`) is kept. Test is never
read.

The states are computed with transformers in float32 on the bundled GGUF, dequantised, cut after
``layer`` (the layers above do not change it), and kept in ``OUTPUT_DIR/states-<split>.pt``, so a
run started again reads them back. At inference llama.cpp reads the same states from the
quantised file (cosine similarity above 0.9999 with these).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from care_lab.data import data_dir, default_strategy_map, load_esconv
from care_lab.data.priorities import POSITION_CAP, turn_number
from care_lab.data.roles import Use, require_role
from care_lab.training.config import WeightsHeadConfig
from care_sdk.bundled.weights_head import WeightsHead, head_text
from care_sdk.prompts import GENERATOR_PROMPT_VERSION
from care_sdk.rubric_checks import top_match
from care_sdk.types import DIMENSIONS, Dimension

__all__ = [
    "HeadTurn",
    "fit_logistic",
    "fit_weights_head",
    "head_turns",
    "position_onehot",
    "probabilities",
    "soft_labels",
    "transformers_states",
]


@dataclass(frozen=True)
class HeadTurn:
    """One labelled supporter turn: its dialogue, the text the head reads, the capped position and
    the reference reply's strategy counts per dimension.

    Examples:
        >>> from care_sdk.types import Dimension
        >>> t = HeadTurn("d1", 3, "Position: ...", 2, {Dimension.COGNITIVE: 1}, (Dimension.COGNITIVE,))
        >>> t.position, t.tops[0].value
        (2, 'cognitive')
    """

    dialogue: str
    index: int
    text: str
    position: int
    counts: dict[Dimension, int]
    tops: tuple[Dimension, ...]


def head_turns(
    path: Path, max_context_messages: int | None, position_cap: int = POSITION_CAP, *, use: Use = "fit"
) -> list[HeadTurn]:
    """Every ESConv supporter turn of ``path`` whose reference reply has mapped strategies, in file order.

    ``use`` is what the turns are read for (``fit``: ``train`` data only; ``select``: the penalty
    is chosen on them, ``train`` or ``selection`` data); the role guard refuses anything else.

    Examples:
        >>> valid = data_dir() / "esconv" / "valid.jsonl"  # doctest: +SKIP
        >>> turns = head_turns(valid, max_context_messages=4, use="select")  # doctest: +SKIP
        >>> len(turns), turns[0].text.splitlines()[0]  # doctest: +SKIP
        (1812, 'Position: supporter turn 1, after 1 messages.')
    """
    require_role(path, use, what="the weights head's " + ("training data" if use == "fit" else "selection data"))
    mapping = default_strategy_map()
    out = []
    for dialogue in load_esconv(path, strategy_map=mapping).records:
        for turn in dialogue.supporter_turns(mapping):
            if turn.top_dimensions:
                text = head_text(turn.context, max_context_messages)
                position = min(turn_number(turn), position_cap)
                out.append(HeadTurn(dialogue.id, turn.index, text, position, dict(turn.counts), turn.top_dimensions))
    return out


def transformers_states(
    texts: Sequence[str], layers: dict[str, tuple[int, str]], path: Path | None = None, batch: int = 16
) -> dict[str, Any]:
    """Pooled hidden states of the bundled model (transformers, float32) for ``texts``.

    Args:
        texts: the texts, each read alone (no template, no BOS).
        layers: name -> (hidden-state index, ``"mean"`` over the tokens or ``"last"`` token);
            ``-1`` is the final layer.
        path: a ``.pt`` file that keeps the states: names it holds are read back, the others computed and added.
        batch: texts per forward pass.

    Returns:
        name -> a ``len(texts) x hidden size`` float tensor.

    Examples:
        >>> states = transformers_states(["I lost my job."], {"layer 15": (15, "mean")})  # doctest: +SKIP
        >>> states["layer 15"].shape  # doctest: +SKIP
        torch.Size([1, 576])
    """
    import torch

    out: dict[str, Any] = torch.load(path) if path is not None and path.exists() else {}
    todo = [n for n in layers if n not in out]
    if not todo:
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from care_sdk.backends.hf import cache_gguf
    from care_sdk.backends.llamacpp import default_model_path

    folder = cache_gguf(default_model_path())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "right"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()  # type: ignore[no-untyped-call]
    deepest = max(layers[n][0] for n in todo)
    if min(layers[n][0] for n in todo) > 0:  # no final layer wanted: cut the model one layer above the deepest
        model.model.layers = model.model.layers[: deepest + 1]  # (the last hidden state is normed: not read)
        model.config.num_hidden_layers = deepest + 1
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    new = {n: torch.zeros(len(texts), model.config.hidden_size) for n in todo}
    started = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            chunk = order[start : start + batch]
            enc = tokenizer([texts[i] for i in chunk], return_tensors="pt", padding=True)
            hidden = model.model(**enc, output_hidden_states=True).hidden_states
            mask = enc["attention_mask"].unsqueeze(-1).float()
            rows = torch.tensor(chunk)
            for name, states in new.items():
                layer, pooling = layers[name]
                if pooling == "last":
                    states[rows] = hidden[layer][torch.arange(len(chunk)), enc["attention_mask"].sum(1) - 1]
                else:
                    states[rows] = (hidden[layer] * mask).sum(1) / mask.sum(1)
            if start // batch % 50 == 0:
                where = path.name if path is not None else "states"
                seconds = time.perf_counter() - started
                print(f"  {where}: {start + len(chunk)}/{len(texts)}, {seconds:.0f} s", flush=True)
    out.update(new)
    if path is not None:
        torch.save(out, path)
    return out


def soft_labels(tops: Sequence[Sequence[Dimension]]) -> Any:
    """One row per turn's reference top dimensions: 1 / (how many tie) on each of them.

    Examples:
        >>> from care_sdk.types import Dimension
        >>> soft_labels([(Dimension.COGNITIVE,), (Dimension.AFFECTIVE, Dimension.PROACTIVE)]).tolist()
        [[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]]
    """
    import torch

    labels = torch.zeros(len(tops), len(DIMENSIONS))
    for row, dims in enumerate(tops):
        for d in dims:
            labels[row, DIMENSIONS.index(d)] = 1 / len(dims)
    return labels


def position_onehot(positions: Sequence[int], position_cap: int = POSITION_CAP) -> Any:
    """One row per position: a one-hot over 0 to ``position_cap``.

    Examples:
        >>> position_onehot([1, 9], position_cap=2).tolist()
        [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    import torch

    onehot = torch.zeros(len(positions), position_cap + 1)
    for row, p in enumerate(positions):
        onehot[row, min(p, position_cap)] = 1.0
    return onehot


def fit_logistic(x: Any, y: Any, penalty: float) -> Any:
    """Multinomial logistic regression with soft labels ``y`` and an L2 penalty (bias not penalised);
    full-batch L-BFGS. Returns the ``(features + 1) x classes`` weights, the bias row last.

    Examples:
        >>> import torch
        >>> x = torch.tensor([[1.0], [-1.0]])
        >>> w = fit_logistic(x, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), penalty=0.01)
        >>> (torch.cat([x, torch.ones(2, 1)], 1) @ w).argmax(1).tolist()
        [0, 1]
    """
    import torch

    x1 = torch.cat([x, torch.ones(len(x), 1)], 1)
    w = torch.zeros(x1.shape[1], y.shape[1], requires_grad=True)
    optimiser = torch.optim.LBFGS([w], lr=1.0, max_iter=500, history_size=20, line_search_fn="strong_wolfe")

    def loss() -> Any:
        optimiser.zero_grad()
        value = -(y * torch.log_softmax(x1 @ w, 1)).sum(1).mean() + penalty * (w[:-1] ** 2).sum()
        value.backward()
        return value

    optimiser.step(loss)  # type: ignore[no-untyped-call]
    return w.detach()


def probabilities(w: Any, x: Any) -> Any:
    """The distribution over :data:`~care_sdk.types.DIMENSIONS` that weights ``w`` of
    :func:`fit_logistic` give each row of ``x``.

    Examples:
        >>> import torch
        >>> probabilities(torch.zeros(2, 3), torch.ones(1, 1)).tolist()
        [[0.3333333432674408, 0.3333333432674408, 0.3333333432674408]]
    """
    import torch

    return torch.softmax(torch.cat([x, torch.ones(len(x), 1)], 1) @ w, 1)


def _match(turns: Sequence[HeadTurn], picks: Sequence[int]) -> float:
    picked = [{d: float(k == p) for k, d in enumerate(DIMENSIONS)} for p in picks]
    values = [top_match(w, t.counts) for t, w in zip(turns, picked, strict=True)]
    counted = [v for v in values if v is not None]
    return sum(counted) / len(counted)


def fit_weights_head(config: WeightsHeadConfig) -> WeightsHead:
    """Run the stage: states (read back where kept), one fit per penalty, the best on valid saved as
    ``OUTPUT_DIR/generator_head.json`` with a summary in its ``training``. Returns the head.

    Examples:
        >>> from care_lab.training import WeightsHeadConfig, fit_weights_head
        >>> head = fit_weights_head(WeightsHeadConfig(output_dir="runs/weights_head"))  # doctest: +SKIP
        >>> head.training["penalty"]  # doctest: +SKIP
        0.1
    """
    import torch

    from care_sdk.backends.llamacpp import default_model_path

    torch.set_num_threads(config.threads)
    started = time.perf_counter()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(config.data_dir) if config.data_dir else data_dir()
    name = f"layer {config.layer} mean"
    turns, x = {}, {}
    for split in ("train", "valid"):
        turns[split] = head_turns(
            root / "esconv" / f"{split}.jsonl",
            config.max_context_messages,
            config.position_cap,
            use="fit" if split == "train" else "select",
        )
        texts = [t.text for t in turns[split]]
        states = transformers_states(texts, {name: (config.layer, "mean")}, out / f"states-{split}.pt")[name]
        x[split] = states
    mean, scale = x["train"].mean(0), x["train"].std(0) + 1e-6

    def features(split: str) -> Any:
        positions = position_onehot([t.position for t in turns[split]], config.position_cap)
        return torch.cat([(x[split] - mean) / scale, positions], 1)

    train, valid = features("train"), features("valid")
    labels = soft_labels([t.tops for t in turns["train"]])
    by_penalty: dict[float, float] = {}
    fits = {}
    for penalty in config.penalties:
        w = fit_logistic(train, labels, penalty)
        picks = probabilities(w, valid).argmax(1).tolist()
        by_penalty[penalty] = _match(turns["valid"], picks)
        fits[penalty] = w
        print(f"weights-head: penalty {penalty:g}: valid top match {by_penalty[penalty]:.4f}", flush=True)
    best = max(config.penalties, key=lambda p: (by_penalty[p], p))
    head = WeightsHead(
        layer=config.layer,
        position_cap=config.position_cap,
        mean=mean.tolist(),
        scale=scale.tolist(),
        coef=fits[best].tolist(),
        max_context_messages=config.max_context_messages,
        prompt_version=GENERATOR_PROMPT_VERSION,
        base_model=default_model_path().name,
        training={
            "data": "ESConv train (fit), valid (penalty)",
            "train_turns": len(turns["train"]),
            "valid_turns": len(turns["valid"]),
            "penalty": best,
            "valid_top_match_by_penalty": {f"{p:g}": round(v, 4) for p, v in by_penalty.items()},
            "seconds": round(time.perf_counter() - started, 1),
        },
    )
    head.save(out / "generator_head.json")
    (out / "report.json").write_text(json.dumps(head.training, indent=2) + "\n", encoding="utf-8")
    print(f"weights-head: penalty {best:g} chosen on valid; wrote {out / 'generator_head.json'}")
    return head
