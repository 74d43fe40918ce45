"""Recipe configs: frozen pydantic models, one per stage, loaded from YAML with errors that name the key.

Unknown keys are errors. The ``trl`` section of the trainer stages is passed through to TRL's own
config class (``SFTConfig`` / ``GRPOConfig``), so every TRL flag keeps working; TRL rejects the
keys it does not know, and the error names the file and key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from care_sdk.errors import ConfigError

__all__ = [
    "BuildDataConfig",
    "LoraSettings",
    "PrefGRPOConfig",
    "SFTStageConfig",
    "WeightsHeadConfig",
    "load_config",
    "model_identity",
]

C = TypeVar("C", bound=BaseModel)


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


def model_identity(spec: str) -> str:
    """The model a backend spec names, for telling whether two specs are the same judge and author.

    The provider, the server address and an organisation prefix do not count; ``default`` and
    ``base`` are both the bundled SmolLM2-135M (a judge or candidate gets no adapter).

    Examples:
        >>> model_identity("openai:Qwen/Qwen3-235B-A22B-Instruct-2507@http://teacher:8000/v1")
        'qwen3-235b-a22b-instruct-2507'
        >>> model_identity("default") == model_identity("base"), model_identity("openai:gpt-4.1")
        (True, 'gpt-4.1')
    """
    kind, _, rest = spec.strip().partition(":")
    if kind.lower() in ("default", "base") and not rest:
        return "bundled-smollm2-135m"
    if not rest:
        return spec.strip().lower()
    model = rest.partition("@")[0] if kind.lower() == "openai" else rest
    name = model.rstrip("/").rsplit("/", 1)[-1]
    return (name.removesuffix(".gguf") if kind.lower() == "llamacpp" else name).lower()


class BuildDataConfig(_Config):
    """Settings of ``care train build-data``.

    Examples:
        >>> BuildDataConfig(output_dir="out", teacher=None, target_judges=None).on_misaligned
        'keep'
    """

    output_dir: str
    """Where to write ``sft/{train,valid,test}.jsonl``, ``pairs/{...}.jsonl``, ``roles.json`` and ``report.json``."""
    data_dir: str | None = None
    """The data directory; ``$CARE_DATA_DIR`` when omitted (see :func:`care_lab.data.data_dir`)."""
    targets: Literal["teacher", "templates", "evaluator"] = "teacher"
    """How SFT targets are written: by the ``teacher`` backend (filtered by the judges), or from the
    documented criterion templates filled from each dialogue (no model; ESConv train/valid only, no
    preference pairs; see :mod:`care_lab.training.rubric_targets`), or ``evaluator``: evaluator SFT
    records, per-criterion scores from the Lend-an-Ear judge and ESConv candidate kinds (no model;
    see :mod:`care_lab.training.evaluator_targets`)."""
    esconv_splits: tuple[str, ...] = ("train", "valid", "test")
    """ESConv splits to read (each keeps its split, and its data role, in the output)."""
    use_mint: bool = True
    """Also read Lend-an-Ear (SFT targets from tactic-tagged turns, and judged-response pairs)."""
    strategy_map: str | None = None
    """A JSON/YAML strategy → dimension mapping file; the documented default when omitted."""
    max_dialogues: int | None = Field(default=None, ge=1)
    """Read at most this many dialogues per source file (a slice, for smoke runs)."""
    max_turns: int | None = Field(default=None, ge=1)
    """Build at most this many SFT targets (and candidate-pair contexts) per split."""
    max_context_messages: int | None = Field(default=8, ge=1)
    """Show the teacher, judges, candidates and annotator only the last this many context messages
    (records keep all)."""
    skip_unmapped: bool = True
    """Leave out turns whose strategies map to no dimension (e.g. only ``Others``)."""
    teacher: str | None = "default"
    """Backend spec of the teacher that writes target rubrics; ``None``: no teacher, the fixed
    criteria with count-derived weights (the priority signal only)."""
    teacher_max_tokens: int = Field(default=400, ge=32)
    """Token budget of one teacher rubric."""
    teacher_attempts: int = Field(default=3, ge=1)
    """Teacher samples per turn (retries on a reply that does not parse, and on misaligned weights
    when ``on_misaligned`` enforces alignment)."""
    on_misaligned: Literal["keep", "reject", "repair"] = "keep"
    """Alignment of a target's weights with the reference's strategy counts (r_align) is measured
    and reported for every target. ``keep``: that is all (the default: targets are filtered for
    quality, not forced into alignment). ``reject``: re-sample misaligned targets, then drop them.
    ``repair``: re-sample, then keep the criteria with count-derived weights (counted as ``repaired``)."""
    target_judges: tuple[str, ...] | None = ("default", "default")
    """Backend specs of the target judges (quality and consistency with the reference reply); a
    target is kept only when all accept. ``None``: no filter."""
    judge_max_tokens: int = Field(default=96, ge=16)
    """Token budget of one judge verdict (target and pair judges)."""
    candidates: tuple[str, ...] = ("default", "default")
    """Backend specs that each roll out one candidate reply per context (a spec may repeat: each
    entry samples with its own seed). Empty: no candidate rollouts."""
    include_reference: bool = True
    """The dataset's own reply (ESConv's human supporter) is one more candidate."""
    candidate_max_tokens: int = Field(default=160, ge=8)
    """Token budget of one candidate reply."""
    candidate_temperature: float = Field(default=0.8, ge=0)
    """Sampling temperature of the candidate replies."""
    judges: tuple[str, ...] | None = None
    """Backend specs of the pair judges: every pair of candidates of a context is compared by each
    judge (in a seeded random order); a pair is kept when a strict majority prefers the same reply;
    ties and split votes are dropped. No judge may write candidates (:func:`model_identity`), so
    none votes on a pair holding its own reply. ``None`` (the default: the one bundled model cannot
    be both): no candidate pairs."""
    pair_contexts: int | None = Field(default=None, ge=1)
    """At most this many contexts per split get candidate rollouts (the first of the SFT target
    turns); all of them when omitted."""
    max_pairs_per_context: int = Field(default=2, ge=1)
    """At most this many judged pairs per context (largest majority first)."""
    annotator: str | None = "default"
    """Backend spec of the strategy annotator for chosen replies without labels; ``None``: such pairs
    are dropped (and counted)."""
    criteria_per_dimension: int = Field(default=2, ge=1, le=5)
    """Criteria per dimension in target rubrics."""
    mint_max_length_ratio: float | None = Field(default=None, ge=1)
    """Lend-an-Ear pairs whose longer reply is more than this many times the shorter (in
    characters) are dropped and counted; ``None``: kept. Either way the report gives the pairs'
    length balance (share of pairs whose chosen reply is the longer one, median lengths)."""
    pref_margin: float = Field(default=1.0, ge=0)
    """Minimum MINT-judge score (aggregated empathy) margin between chosen and rejected Lend-an-Ear replies."""
    max_pairs_per_turn: int = Field(default=2, ge=1)
    """At most this many Lend-an-Ear pairs per supporter turn (best vs worst first)."""
    mint_reject_human: bool = False
    """Whether a Lend-an-Ear pair may reject the human supporter's reply (the MINT judge scores the
    human reply below model replies on most turns; it rewards validation and elaboration)."""
    offcontext_pairs: bool = False
    """Also build off-context ESConv pairs: the reference reply vs a supporter reply from another
    dialogue. Not the method's pairs: the rejected reply is off-topic, so any rubric separates the two."""
    position_prior_weight: float = Field(default=0.0, ge=0, lt=1)
    """``targets: templates`` only: the share ``λ`` of the turn-position prior in the target weights,
    ``(1 - λ) · count weights + λ · prior``, where the prior is how often each dimension is on top
    at this supporter-turn number in the train split (ties split; numbers from 15 on pooled). The
    reference's own strategies stay on top unless the position makes another dimension far more
    likely (at 0.5 and one strategy: a lead of over 0.4 in the prior, as at ESConv's first two
    turns). 0: counts only."""
    negatives: tuple[Literal["offcontext", "platitude", "evasive"], ...] = (
        "offcontext",
        "offcontext",
        "offcontext",
        "platitude",
        "evasive",
    )
    """``targets: evaluator`` only: the kinds of the ESConv replies that are scored against each
    reference reply, taken in turn (``offcontext``: a supporter reply from another conversation;
    ``platitude``; ``evasive``); see :mod:`care_lab.training.evaluator_targets`."""
    negatives_per_reference: int = Field(default=1, ge=1, le=8)
    """``targets: evaluator`` only: how many of :attr:`negatives` each ESConv reference reply gets,
    each under the same context and rubric as the reference."""
    esconv_per_judged: float = Field(default=1.0, gt=0)
    """``targets: evaluator`` with ``use_mint`` only: ESConv records kept per Lend-an-Ear judged
    record (a seeded sample); 1: both sources weigh the same."""
    seed: int = 0
    """Seed of every random choice (splits, candidate order, backend sampling)."""

    @field_validator("judges")
    @classmethod
    def _no_self_votes(cls, judges: tuple[str, ...] | None, info: ValidationInfo) -> tuple[str, ...] | None:
        authors = {model_identity(c): c for c in info.data.get("candidates", ())}
        for n, judge in enumerate(judges or ()):
            if model_identity(judge) in authors:
                raise ValueError(
                    f"judges[{n}] ({judge}) also writes candidates ({authors[model_identity(judge)]}); "
                    "a judge never votes on a pair holding its own candidate: use judges that write no candidate"
                )
        return judges


class LoraSettings(_Config):
    """PEFT LoRA settings.

    Examples:
        >>> LoraSettings().r
        16
    """

    r: int = Field(default=16, ge=1)
    """LoRA rank."""
    alpha: int = Field(default=32, ge=1)
    """LoRA alpha."""
    dropout: float = Field(default=0.05, ge=0, lt=1)
    """LoRA dropout."""
    target_modules: tuple[str, ...] | Literal["all-linear"] = "all-linear"
    """Modules to adapt."""
    layers_to_transform: tuple[int, ...] | None = None
    """Adapt only these decoder layers (e.g. the top few: backpropagation then stops there, which
    makes CPU runs several times cheaper); all layers when omitted."""


class _StageConfig(_Config):
    """Settings the generator-training stages (``sft``, ``pref-grpo``) share."""

    data: str
    """The training records, SFT records (sft) or preference pairs (pref-grpo): a ``train.jsonl``
    written by build-data, or the build-data output directory."""
    model: str
    """The model to start from: a transformers directory, ``tiny`` (a tiny random SmolLM2-shaped
    model), ``bundled`` (SmolLM2-135M-Instruct from the bundled GGUF), ``bundled:generator`` or
    ``bundled:evaluator`` (it with the shipped adapter merged), or for pref-grpo the SFT output
    (merged directory, adapter directory, or the SFT ``output_dir``)."""
    output_dir: str
    """Where to write the adapter (``adapter/``), the merged model (``merged/``) and logs (pref-grpo:
    also the reward log)."""
    finetune: Literal["lora", "full"] = "lora"
    """LoRA adapters or full fine-tuning."""
    lora: LoraSettings = LoraSettings()
    """LoRA settings (with ``finetune: lora``)."""
    max_examples: int | None = Field(default=None, ge=1)
    """Train on at most this many records (first ones, in file order)."""
    max_context_messages: int | None = Field(default=8, ge=1)
    """Keep only the last this many context messages in prompts."""
    criteria_per_dimension: int = Field(default=2, ge=1, le=5)
    """Criteria per dimension the prompt asks for (and pref-grpo's format term checks)."""
    merge: bool = True
    """Also save a merged model (LoRA folded into the weights)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Model weights dtype."""
    trl: dict[str, Any] = {}
    """Passed to TRL's config class: ``trl.SFTConfig`` for sft (e.g. ``learning_rate``, ``max_steps``),
    ``trl.GRPOConfig`` for pref-grpo (e.g. ``num_generations``, ``max_completion_length``, ``use_vllm``)."""


class SFTStageConfig(_StageConfig):
    """Settings of ``care train sft``.

    Examples:
        >>> SFTStageConfig(data="out/sft/train.jsonl", model="tiny", output_dir="runs/sft").finetune
        'lora'
    """

    role: Literal["generator", "evaluator"] = "generator"
    """The model trained: the rubric ``generator`` (records ``context`` → ``target`` rubric JSON) or
    the ``evaluator`` (records ``context``, ``rubric``, ``reply`` → ``target`` score JSON), each
    prompted exactly as at inference."""
    eval_data: str | None = None
    """Optional evaluation records."""


class PrefGRPOConfig(_StageConfig):
    """Settings of ``care train pref-grpo``.

    Examples:
        >>> PrefGRPOConfig(data="out/pairs/train.jsonl", model="runs/sft/merged", output_dir="runs/grpo",
        ...                evaluator="default").tie
        0.0
    """

    evaluator: str
    """Backend spec of the frozen evaluator (e.g. ``openai:MODEL@URL`` at scale, ``default`` here)."""
    evaluator_max_tokens: int = Field(default=160, ge=16)
    """Token budget of one evaluation."""
    evaluator_max_attempts: int = Field(default=2, ge=1)
    """Replies tried per evaluation before it counts as failed (``None`` reward)."""
    tie: float = Field(default=0.0, ge=0, le=1)
    """r_pref of a tie."""
    reward_weights: dict[Literal["format", "r_pref", "r_align"], float] = {"format": 1.0, "r_pref": 1.0, "r_align": 1.0}
    """Weight of each reward term in the GRPO objective."""


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


def validate_config(cls: type[C], data: Any, *, source: str = "config") -> C:
    """Validate a mapping as ``cls``; errors name the source and key.

    Examples:
        >>> validate_config(LoraSettings, {"rank": 8}, source="sft.yaml")
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: sft.yaml: rank: unknown key
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of settings, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_describe(exc)}") from None


def _read_yaml(path: Path, chain: tuple[Path, ...] = ()) -> Any:
    """Parse a YAML file whose ``!include FILE[#KEY]`` values are read from other YAML files."""
    import yaml

    if not path.is_file():
        raise ConfigError(
            f"{chain[-1] if chain else path}: no such config file{f' to include: {path}' if chain else ''}"
        )
    if path.resolve() in chain:
        raise ConfigError(f"{path}: includes itself (through {' -> '.join(map(str, chain))})")

    loader_class: Any = type("IncludeLoader", (yaml.SafeLoader,), {})

    def include(loader: Any, node: Any) -> Any:
        target = str(loader.construct_scalar(node))
        name, _, key = target.partition("#")
        value = _read_yaml(path.parent / name, (*chain, path.resolve()))
        for part in filter(None, key.split(".")):
            if not isinstance(value, dict) or part not in value:
                raise ConfigError(f"{path}: !include {target}: no key {part!r}")
            value = value[part]
        return value

    loader_class.add_constructor("!include", include)
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=loader_class)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:line {mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None


class WeightsHeadConfig(_Config):
    """Settings of ``care train weights-head`` (:mod:`care_lab.training.weights_head`).

    Examples:
        >>> WeightsHeadConfig(output_dir="out").layer
        15
    """

    output_dir: str
    """Where to write ``generator_head.json``, ``report.json`` and the kept states (``states-<split>.pt``)."""
    data_dir: str | None = None
    """The data directory; ``$CARE_DATA_DIR`` when omitted (see :func:`care_lab.data.data_dir`)."""
    layer: int = Field(default=15, ge=1)
    """The hidden state read: ``hidden_states[layer]``, the output of the first ``layer`` decoder layers."""
    max_context_messages: int | None = Field(default=4, ge=1)
    """The context messages the prompt text shows (the bundled generator adapter's setting)."""
    position_cap: int = Field(default=15, ge=1)
    """Supporter-turn numbers from this one on share one position feature."""
    penalties: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
    """L2 penalties tried; the best on ESConv valid is kept."""
    threads: int = Field(default=2, ge=1)
    """CPU threads (the fit repeats exactly with the same number)."""


def load_config(cls: type[C], path: str | Path, overrides: dict[str, Any] | None = None) -> C:
    """Read a YAML config file as ``cls``; relative paths in it stay relative to the working directory.

    A value written ``!include FILE`` is the content of another YAML file (relative to the
    including one), ``!include FILE#KEY`` one key of it (``KEY.SUB`` for nested keys): the
    paper-scale configs share one evaluator definition that way.

    Args:
        cls: the stage's config class.
        path: the YAML file.
        overrides: top-level keys that replace the file's (e.g. from the command line).

    Raises:
        ConfigError: the file (or an included one) is missing, not YAML, or has an unknown or
            invalid key (named).

    Examples:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "shared.yaml").write_text("judge: {seed: 3}\\n")
        >>> _ = (d / "b.yaml").write_text("output_dir: out\\nseed: !include shared.yaml#judge.seed\\n")
        >>> load_config(BuildDataConfig, d / "b.yaml").seed
        3
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        import yaml  # noqa: F401
    except ImportError as exc:  # pragma: no cover - pyyaml is in the train extra
        from care_sdk.errors import MissingDependencyError

        raise MissingDependencyError("yaml", extra="train") from exc
    data = _read_yaml(path)
    if data is None:
        data = {}
    if isinstance(data, dict) and overrides:
        data = {**data, **overrides}
    return validate_config(cls, data, source=str(path))
