"""AdaptiveReward: rubric generation plus rubric-conditioned evaluation, as one reward per reply."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from care_sdk._calls import METRIC_PREFIX, report_to_trainer, trl_items, trl_profiles
from care_sdk.addons import AddOns, ContextFitReader
from care_sdk.addons import add_ons as build_add_ons
from care_sdk.backends import Backend, resolve_backend, spec_per_role
from care_sdk.errors import CareError, ConfigError
from care_sdk.evaluator import RubricEvaluator
from care_sdk.generator import RubricGenerator
from care_sdk.guards import Guards, merge_outcomes, screen_items
from care_sdk.plans import Plan, adrive, drive, offload
from care_sdk.profiles import ProfileLike, UserProfile, as_profile, as_profiles
from care_sdk.provenance import Ledger, Provenance, open_ledger, producers, traced
from care_sdk.types import (
    DIMENSIONS,
    Context,
    Dialogue,
    Message,
    Messages,
    RewardResult,
    Rubric,
    as_messages,
    fixed_criteria,
)
from care_sdk.variants import CriteriaMode, Variant, WeightsMode, as_variant, needs_generator, variant_modes

if TYPE_CHECKING:
    from care_sdk.audit import Audit

Outcome = tuple[RewardResult, CareError | None]
_Profiles = Sequence[UserProfile | None]

__all__ = ["AdaptiveReward"]

DEFAULT_NAME = "care_reward"
"""The ``__name__`` of a reward not given ``name=``; its metrics keep the ``care/`` prefix."""

ScoreItem = tuple[Context, str]
"""One reward request: the context and the candidate reply."""
_Item = tuple[Messages, str]
"""A reward request whose context was normalised where it entered (:func:`~care_sdk.types.as_messages`)."""


class AdaptiveReward:
    """One number per reply: the rubric for its context, applied by the evaluator.

    r = sum_d w_d * mean_{c in d} (s_c - 1) / 4, in [0, 1]. Replies to the same context share one
    rubric. The paper's ablations are variants (:mod:`care_sdk.variants`): ``variant="uniform_weights"``
    keeps generated criteria with weights 1/3 each; ``"fixed_criteria"`` keeps generated weights over
    the fixed six criteria; ``"fixed_rubric"`` judges by the fixed six criteria at weights 1/3 each
    (no generator needed); passing ``rubric=`` judges every reply against that one rubric (no
    generator needed), after the variant's weights and criteria are applied to it. To build a reward
    from backend specs, see :meth:`from_backend`.

    The instance is a TRL reward function: ``reward(prompts, completions, **kwargs)`` returns
    ``list[float | None]``, ``None`` where no reward could be computed.

    A reply may be judged for the user a profile describes (``profile=``; ``profiles=`` in batch
    calls, one per item; a ``profile`` dataset column in TRL): the generator and the evaluator
    each get it (see :mod:`care_sdk.profiles`).

    Args:
        generator: the rubric generator (not needed with ``rubric=``).
        evaluator: the evaluator.
        variant: ``"care"`` or an ablation: ``"uniform_weights"``, ``"fixed_criteria"``,
            ``"fixed_rubric"`` (the generator is not used there and may be ``None``).
        rubric: a fixed rubric for every context.
        guards: deterministic pre-checks and flags (see :mod:`care_sdk.guards`): by default an
            empty or punctuation-only reply gets 0 without a model call, a reply over 2,000
            characters is truncated, and a reply flagged for text aimed at the evaluator (forged
            turns, requests for scores, the evaluator's own answer format) gets 0 without a model
            call; ``Guards(on_flag="report")`` only reports flags, ``None`` turns every guard off.
        context_fit: a term outside the method (a :class:`~care_sdk.addons.ContextFitReader`):
            when there is one, the reward of every evaluated reply is
            ``context_fit.combine(rubric reward, fit)``, where ``fit`` is how likely the reply was
            written for its context; ``RewardResult.context_fit`` holds the fit and
            ``RewardResult.parts`` names what produced the reward. ``None`` (the default): the
            method's reward, on every backend. Build one with
            ``care_sdk.addons.add_ons("context-fit").context_fit``.
        name: the reward's ``__name__`` (TRL names its ``rewards/<name>/...`` metrics after it) and
            the prefix of the metrics it logs itself: ``care/...`` for the default ``care_reward``,
            ``<name>/...`` otherwise, so two rewards in one trainer log apart.
        audit: a :class:`~care_sdk.audit.Audit` handed every batch of a trainer call (``__call__``,
            ``acall``): a reference judge on sampled replies, canaries and alarms, off the training
            path; its metrics go through the trainer's ``log_metric`` as ``<prefix>/audit/...``.

    The instance pickles by its configuration (backend specs, options, guards): live clients and
    loaded models are opened again in the process that unpickles it, an in-memory rubric cache
    starts empty there and an :class:`~care_sdk.SqliteCache` reopens its file. A reward built on a
    live model object refuses to pickle and says which spec to pass instead.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
        >>> gen = RubricGenerator(ScriptedBackend([rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})]))
        >>> ev = RubricEvaluator(ScriptedBackend([evaluation_json([5, 5, 5, 5, 1, 1])] * 2))
        >>> reward = AdaptiveReward(gen, ev)
        >>> reward(["I failed my exam."] * 2, ["That sounds really hard.", "Tell me more."])
        [0.75, 0.75]
    """

    def __init__(
        self,
        generator: RubricGenerator | None = None,
        evaluator: RubricEvaluator | None = None,
        *,
        variant: Variant | str = "care",
        rubric: Rubric | None = None,
        guards: Guards | None = Guards(),  # noqa: B008 - frozen, shared safely
        context_fit: ContextFitReader | None = None,
        name: str = DEFAULT_NAME,
        audit: Audit | None = None,
    ) -> None:
        if not name or "/" in name or name == METRIC_PREFIX:
            raise ConfigError(f"name: {name!r} must be non-empty, without '/', and not {METRIC_PREFIX!r}")
        if evaluator is None:
            raise ConfigError("AdaptiveReward needs an evaluator")
        _check_context_fit(context_fit)
        self.variant: Variant = as_variant(variant)
        """The reward variant (``care`` when a fixed ``rubric`` is given without one)."""
        self.weights: WeightsMode
        """Where the rubric's weights come from under :attr:`variant` (``generated`` or ``uniform``)."""
        self.criteria: CriteriaMode
        """Where the rubric's criteria come from under :attr:`variant` (``generated`` or ``fixed``)."""
        self.weights, self.criteria = variant_modes(self.variant)
        if not needs_generator(self.variant):
            generator = None  # the variant judges by the fixed rubric
            rubric = rubric if rubric is not None else Rubric.uniform_fixed()
        if rubric is None and generator is None:
            raise ConfigError("AdaptiveReward needs a generator unless a fixed rubric is given")
        self.generator = generator
        self.evaluator = evaluator
        # Every rubric, given or generated, goes through _adapt: no option is ever ignored.
        self.rubric = self.adapt(rubric) if rubric is not None else None
        self.guards = guards
        self.context_fit = context_fit
        self.__name__ = name  # TRL names reward functions by __name__
        self.audit = audit

    @property
    def metric_prefix(self) -> str:
        """The prefix of the metrics this reward logs: ``care`` for the default name, else the name.

        Examples:
            >>> from care_sdk.testing import ScriptedBackend
            >>> ev = RubricEvaluator(ScriptedBackend([]))
            >>> AdaptiveReward(evaluator=ev, rubric=Rubric.uniform_fixed()).metric_prefix
            'care'
            >>> AdaptiveReward(evaluator=ev, rubric=Rubric.uniform_fixed(), name="care_fixed").metric_prefix
            'care_fixed'
        """
        return METRIC_PREFIX if self.__name__ == DEFAULT_NAME else self.__name__

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "last_results"}  # per-process results stay behind

    @property
    def parts(self) -> tuple[str, ...]:
        """What produces this reward: the variant, then each opt-in add-on outside the method.

        Every :class:`RewardResult` it returns carries the same tuple in ``parts``.

        Examples:
            >>> from care_sdk.testing import ScriptedBackend
            >>> AdaptiveReward(RubricGenerator(ScriptedBackend([])), RubricEvaluator(ScriptedBackend([]))).parts
            ('care',)
        """
        parts: list[str] = [self.variant]
        generator = self.generator if self.rubric is None and self.weights != "uniform" else None
        if generator is not None and generator.weight_reader is not None:
            parts.append(generator.weight_reader.name)
        if self.context_fit is not None:
            parts.append("context_fit")
        return tuple(parts)

    def _stamped(self, outcomes: list[Outcome]) -> list[Outcome]:
        parts = self.parts
        settled = Provenance(**producers(self._rubric_writer, self.evaluator))  # guards settled it: no rubric, no call
        return [
            (result.model_copy(update={"parts": parts, "provenance": result.provenance or settled}), error)
            for result, error in outcomes
        ]

    @property
    def _rubric_writer(self) -> RubricGenerator | None:
        """The generator that writes each reply's rubric (``None`` under a fixed rubric)."""
        return self.generator if self.rubric is None else None

    @classmethod
    def from_backend(
        cls,
        backend: str | Backend | Any = "default",
        *,
        generator_backend: str | Backend | Any | None = None,
        evaluator_backend: str | Backend | Any | None = None,
        variant: Variant | str = "care",
        add_ons: str | Sequence[str] | AddOns | None = None,
        generator_options: Mapping[str, Any] | None = None,
        evaluator_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> AdaptiveReward:
        """The reward of a variant, built from backend specs (or backend objects): the one factory the
        command line, the service, the verl plug-in and Ray scoring use.

        ``generator_backend`` and ``evaluator_backend`` default to ``backend``; a spec both roles use is
        resolved once and shared (one model loaded once), except a per-role spec such as ``default``
        (:func:`~care_sdk.backends.spec_per_role`), which gives each component its own bundled adapter.
        ``fixed_rubric`` builds no generator and resolves no generator backend. ``add_ons`` are opt-in
        add-ons outside the method, ``NAME[=SPEC]`` strings as in ``care score --add-on`` (see
        :func:`care_sdk.addons.add_ons`) or built :class:`~care_sdk.addons.AddOns`; without them every
        backend computes the method's reward. ``generator_options`` and
        ``evaluator_options`` are keyword arguments of :class:`RubricGenerator` and
        :class:`RubricEvaluator` (``seed``, ``max_tokens``, ``cache``, ...). ``options`` are the
        constructor's (``rubric``, ``guards``, ``context_fit``, ``name``).

        Built from spec strings and picklable options, these arguments are a picklable recipe for the
        reward: :mod:`care_sdk.ray_scoring` sends them to each actor, which calls this method.

        Raises:
            ConfigError: an unknown variant or add-on, or add-ons that cannot be built (the message
                starts with ``add_ons:``).

        Examples:
            >>> from care_sdk.testing import ScriptedBackend
            >>> reward = AdaptiveReward.from_backend(ScriptedBackend([]), variant="uniform_weights",
            ...                                      evaluator_options={"seed": 1})
            >>> reward.variant, reward.weights, reward.evaluator.seed
            ('uniform_weights', 'uniform', 1)
            >>> reward.generator.backend is reward.evaluator.backend  # one backend serves both roles
            True
        """
        extra = _built_add_ons(add_ons)
        if extra.context_fit is not None:
            if options.get("context_fit") is not None:
                raise ConfigError("add_ons: context-fit is asked for twice (context_fit= and add_ons=); choose one")
            options["context_fit"] = extra.context_fit
        built: dict[Any, Any] = {}

        def backend_for(spec: Any) -> Any:
            spec = backend if spec is None else spec
            if spec_per_role(spec):
                return spec  # each component resolves it with its role, so it gets its own backend
            key = spec if isinstance(spec, str) else id(spec)
            if key not in built:
                built[key] = resolve_backend(spec)
            return built[key]

        evaluator = RubricEvaluator(backend_for(evaluator_backend), **dict(evaluator_options or {}))
        generator = None
        if needs_generator(variant):
            generator_kwargs = {**dict(generator_options or {}), **extra.generator_options()}
            generator = RubricGenerator(backend_for(generator_backend), **generator_kwargs)
        return cls(generator, evaluator, variant=variant, **options)

    # -- rubrics -------------------------------------------------------------------------------

    def adapt(self, rubric: Rubric) -> Rubric:
        """The rubric this reward judges by when the generator wrote ``rubric`` (options applied).

        Examples:
            >>> from care_sdk.testing import ScriptedBackend
            >>> reward = AdaptiveReward(RubricGenerator(ScriptedBackend([])), RubricEvaluator(ScriptedBackend([])),
            ...                         variant="uniform_weights")
            >>> one_sided = Rubric.uniform_fixed().with_weights({"cognitive": 1, "affective": 0, "proactive": 0})
            >>> reward.adapt(one_sided).weights == Rubric.uniform_fixed().weights
            True
        """
        if self.criteria == "fixed":
            rubric = Rubric(weights=rubric.weights, criteria=fixed_criteria())
        if self.weights == "uniform":
            rubric = rubric.with_weights({d: 1.0 for d in DIMENSIONS})
        return rubric

    def _finish(self, rubrics: list[Rubric | CareError]) -> list[Rubric | CareError]:
        return [r if isinstance(r, CareError) else self.adapt(r) for r in rubrics]

    # -- scoring -------------------------------------------------------------------------------

    @staticmethod
    def _combine(
        rubrics: list[Rubric | CareError], evaluations: list[Any]
    ) -> list[tuple[RewardResult, CareError | None]]:
        outcomes: list[tuple[RewardResult, CareError | None]] = []
        it = iter(evaluations)
        for rubric in rubrics:
            if isinstance(rubric, CareError):
                outcomes.append((RewardResult.failed(rubric, stage="rubric"), rubric))
                continue
            evaluation = next(it)
            if isinstance(evaluation, CareError):
                outcomes.append((RewardResult.failed(evaluation, rubric=rubric, stage="evaluation"), evaluation))
            else:
                outcomes.append((RewardResult.from_parts(rubric, evaluation), None))
        return outcomes

    def _plan(self, items: Sequence[_Item], profiles: _Profiles) -> Plan[Outcome]:
        """The reward's steps as a plan for the engine, written once for :func:`drive` and
        :func:`adrive`: the guards' pre-pass, then each stage a batch call of a component's public
        method in its sync and async form (rubrics, evaluations, the context-fit add-on when on;
        each runs its own plan on its own backend), then each result's provenance, then the merge. It
        yields only those calls, so the backend it is driven with sends nothing itself. The generator
        and the evaluator report what their stage cost to the ledger open while they run (see
        :mod:`care_sdk.provenance`). ``profiles`` holds one normalised profile (or ``None``) per item;
        each goes with its item to the generator and the evaluator."""
        ledger = Ledger()
        screens, todo = screen_items(items, self.guards)
        kept = [p for p, screened in zip(profiles, screens, strict=True) if screened.blocked is None]
        contexts = [c for c, _ in todo]
        with open_ledger(ledger):
            if self.rubric is not None:
                rubrics: list[Rubric | CareError] = [self.rubric] * len(contexts)
            else:
                generator = self.generator
                assert generator is not None
                written = yield from offload(
                    partial(generator.generate_batch, contexts, kept),
                    partial(generator.agenerate_batch, contexts, kept),
                )
                rubrics = self._finish(written)
            judged, judged_profiles = self._eval_items(todo, rubrics, kept)
            evaluator = self.evaluator
            evaluations = yield from offload(
                partial(evaluator.evaluate_batch, judged, judged_profiles),
                partial(evaluator.aevaluate_batch, judged, judged_profiles),
            )
        outcomes = self._combine(rubrics, evaluations)
        fit_seconds: dict[int, float] = {}
        if self.context_fit is not None:
            fitted = self._fit_items(outcomes)
            pairs = [todo[i] for i in fitted]
            fit = self.context_fit
            started = time.perf_counter()
            values = yield from offload(partial(fit.score_batch, pairs), partial(fit.ascore_batch, pairs))
            fit_seconds = dict.fromkeys(fitted, (time.perf_counter() - started) / max(1, len(fitted)))
            outcomes = self._apply_fit(outcomes, fitted, values)
        outcomes = traced(
            outcomes, rubrics, kept, ledger, fit_seconds, generator=self._rubric_writer, evaluator=self.evaluator
        )
        merged = merge_outcomes(screens, outcomes, self.guards)
        return [*self._stamped(merged)]

    @staticmethod
    def _fit_items(outcomes: list[tuple[RewardResult, CareError | None]]) -> list[int]:
        """Indices of the evaluated items whose context fit is read (those with a reward)."""
        return [i for i, (result, _) in enumerate(outcomes) if result.reward is not None]

    def _apply_fit(
        self, outcomes: list[tuple[RewardResult, CareError | None]], fitted: list[int], values: list[float | CareError]
    ) -> list[tuple[RewardResult, CareError | None]]:
        assert self.context_fit is not None
        out = list(outcomes)
        for i, value in zip(fitted, values, strict=True):
            result = out[i][0]
            if isinstance(value, CareError):
                out[i] = (RewardResult.failed(value, rubric=result.rubric, stage="context_fit"), value)
            else:
                assert result.reward is not None
                reward = self.context_fit.combine(result.reward, value)
                out[i] = (result.model_copy(update={"reward": reward, "context_fit": value}), None)
        return out

    @staticmethod
    def _eval_items(
        items: Sequence[_Item], rubrics: list[Rubric | CareError], profiles: _Profiles
    ) -> tuple[list[tuple[Messages, Rubric, str]], list[UserProfile | None]]:
        """The evaluator's items and their profiles: those whose rubric was written."""
        judged = [
            (c, r, reply, p) for (c, reply), r, p in zip(items, rubrics, profiles, strict=True) if isinstance(r, Rubric)
        ]
        return [(c, r, reply) for c, r, reply, _ in judged], [p for *_, p in judged]

    def score_batch(
        self, items: Sequence[ScoreItem], profiles: Sequence[ProfileLike] | None = None
    ) -> list[RewardResult]:
        """Score many ``(context, reply)`` pairs; a failure is a result with ``reward=None`` and ``error``.

        ``profiles``, when given, holds one user profile (or ``None``) per item. Each context is
        normalised here (:func:`~care_sdk.types.as_messages`; :data:`~care_sdk.types.Messages` pass
        as they are).

        Raises:
            InputError: ``profiles`` has another length than ``items``, or an entry is not a profile.

        Examples:
            >>> from care_sdk.testing import ScriptedBackend, evaluation_json
            >>> reward = AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend(["not json"] * 3)),
            ...                         rubric=Rubric.uniform_fixed())
            >>> result = reward.score_batch([("I'm sad.", "Cheer up!")])[0]
            >>> result.reward is None, result.error.startswith("evaluation failed")
            (True, True)
        """
        plan = self._plan(_items(items), as_profiles(profiles, len(items)))
        outcomes = cast("list[Outcome]", drive(plan, self.evaluator.backend))
        return [result for result, _ in outcomes]

    async def ascore_batch(
        self, items: Sequence[ScoreItem], profiles: Sequence[ProfileLike] | None = None
    ) -> list[RewardResult]:
        """Async form of :meth:`score_batch`."""
        plan = self._plan(_items(items), as_profiles(profiles, len(items)))
        outcomes = cast("list[Outcome]", await adrive(plan, self.evaluator.backend))
        return [result for result, _ in outcomes]

    def score(self, context: Context, reply: str, profile: ProfileLike = None) -> RewardResult:
        """Score one reply to ``context`` (said to the user ``profile`` describes, when given).

        Raises:
            CareError: the rubric or the evaluation could not be produced, or ``profile`` is not a
                profile (:class:`~care_sdk.errors.InputError`).

        Examples:
            >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
            >>> backend = ScriptedBackend([rubric_json({"cognitive": 1, "affective": 1, "proactive": 1}),
            ...                            evaluation_json([4] * 6)])
            >>> reward = AdaptiveReward.from_backend(backend)
            >>> reward.score("I lost my job.", "That is a blow.", profile={"traits": ["proud"]}).reward
            0.75
            >>> [r.messages[1].content.count("Traits: proud") for r in backend.requests]
            [1, 1]
        """
        plan = self._plan(_items([(context, reply)]), [as_profile(profile)])
        return unwrap_outcome(cast("Outcome", drive(plan, self.evaluator.backend)[0]))

    async def ascore(self, context: Context, reply: str, profile: ProfileLike = None) -> RewardResult:
        """Async form of :meth:`score`."""
        plan = self._plan(_items([(context, reply)]), [as_profile(profile)])
        outcomes = cast("list[Outcome]", await adrive(plan, self.evaluator.backend))
        return unwrap_outcome(outcomes[0])

    def score_dialogue(self, dialogue: Dialogue | Sequence[Message | Mapping[str, Any]]) -> list[RewardResult]:
        """One result per assistant turn, each judged against the context before it (and for the
        user the dialogue's ``profile`` describes, when it has one).

        Examples:
            >>> from care_sdk.testing import ScriptedBackend, evaluation_json
            >>> reward = AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend([evaluation_json([3] * 6)] * 2)),
            ...                         rubric=Rubric.uniform_fixed())
            >>> msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            ...         {"role": "user", "content": "I'm sad"}, {"role": "assistant", "content": "Why?"}]
            >>> [r.reward for r in reward.score_dialogue(msgs)]
            [0.5, 0.5]
        """
        if not isinstance(dialogue, Dialogue):
            dialogue = Dialogue(messages=as_messages(dialogue))
        turns = list(dialogue.turns())
        return self.score_batch([(t.context, t.reply) for t in turns], [dialogue.profile] * len(turns))

    # -- TRL -----------------------------------------------------------------------------------

    context_column: str | None = "context"
    """Dataset column whose value is the judged context when present (else the prompt is); ``None`` to ignore."""
    profile_column: str | None = "profile"
    """Dataset column whose value is the user's profile when present (see :mod:`care_sdk.profiles`);
    ``None`` to ignore."""
    last_results: Sequence[RewardResult] = ()
    """The explained results of this instance's latest TRL call, one per completion."""

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """TRL reward signature: one reward per completion, ``None`` where none could be computed.

        Dataset columns arrive as ``kwargs``; a ``context`` column (see :attr:`context_column`)
        replaces the prompt as the judged context, and a ``profile`` column (see
        :attr:`profile_column`: free text or ``{"text", "traits", "history"}`` per row, ``None`` or
        empty for none) gives each reply's user profile. When TRL passes its ``log_metric`` /
        ``log_extra`` hooks, per-dimension scores, rubric weights and errors are logged through
        them (see :func:`care_sdk.integrations.trl.report_to_trainer`).

        Examples:
            >>> from care_sdk.testing import ScriptedBackend, evaluation_json
            >>> backend = ScriptedBackend([evaluation_json([5, 5, 3, 3, 1, 1])])
            >>> reward = AdaptiveReward(evaluator=RubricEvaluator(backend), rubric=Rubric.uniform_fixed())
            >>> logged = {}
            >>> reward([[{"role": "user", "content": "I'm scared."}]], [[{"role": "assistant", "content": "Of what?"}]],
            ...        log_metric=lambda name, value: logged.__setitem__(name, value))
            [0.5]
            >>> logged["care/score/affective"], logged["care/failed"]
            (0.5, 0.0)
        """
        items = trl_items(prompts, completions, kwargs, self.context_column)
        plan = self._plan(items, trl_profiles(kwargs, len(items), self.profile_column))
        results = [result for result, _ in cast("list[Outcome]", drive(plan, self.evaluator.backend))]
        self._report(items, results, kwargs)
        return [r.reward for r in results]

    async def acall(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Async form of :meth:`__call__` (for use in your own async loop; TRL takes :meth:`as_async`)."""
        items = trl_items(prompts, completions, kwargs, self.context_column)
        results = await self.ascore_batch(items, trl_profiles(kwargs, len(items), self.profile_column))
        self._report(items, results, kwargs)
        return [r.reward for r in results]

    def _report(self, items: Sequence[_Item], results: list[RewardResult], kwargs: Mapping[str, Any]) -> None:
        """A trainer call's results: kept in :attr:`last_results`, logged, and handed to the audit."""
        self.last_results = results
        report_to_trainer(results, kwargs, self.metric_prefix)
        if self.audit is not None:
            state = kwargs.get("trainer_state")
            step = getattr(state, "global_step", None)
            self.audit.observe(
                items,
                results,
                reward=self,
                step=int(step) if step is not None else None,
                log_metric=kwargs.get("log_metric") if callable(kwargs.get("log_metric")) else None,
                prefix=self.metric_prefix,
            )

    def as_async(self) -> Callable[..., Coroutine[Any, Any, list[float | None]]]:
        """This reward as a plain ``async def`` function that TRL runs concurrently with other async rewards.

        TRL recognises a coroutine function (``inspect.iscoroutinefunction``) and names its
        metrics after ``__name__``; the function returned here is both, named like this reward.

        Examples:
            >>> import inspect
            >>> from care_sdk.testing import ScriptedBackend
            >>> reward = AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend([])), rubric=Rubric.uniform_fixed())
            >>> fn = reward.as_async()
            >>> inspect.iscoroutinefunction(fn), fn.__name__
            (True, 'care_reward')
        """
        reward = self

        async def care_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
            return await reward.acall(prompts, completions, **kwargs)

        care_reward.__name__ = care_reward.__qualname__ = self.__name__
        return care_reward

    def __repr__(self) -> str:
        return (
            f"AdaptiveReward(generator={self.generator!r}, evaluator={self.evaluator!r}, "
            f"variant={self.variant!r}, fixed_rubric={self.rubric is not None}, "
            f"guards={self.guards!r}, context_fit={self.context_fit!r})"
        )


def _built_add_ons(add_ons: str | Sequence[str] | AddOns | None) -> AddOns:
    """The add-ons ``add_ons`` names, built (or as given), their errors prefixed ``add_ons:``.

    Examples:
        >>> _built_add_ons(None) == AddOns()
        True
        >>> _built_add_ons(["shift-check"])
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: add_ons: unknown add-on 'shift-check'; choose from weights-head, ...
    """
    if isinstance(add_ons, AddOns):
        return add_ons
    try:
        return build_add_ons(add_ons)
    except ConfigError as exc:
        raise ConfigError(f"add_ons: {exc}") from None


def _check_context_fit(context_fit: object) -> None:
    """Refuse a ``context_fit`` that is not a :class:`~care_sdk.addons.ContextFitReader` (a string, say).

    Examples:
        >>> _check_context_fit("on")
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: context_fit: 'on' is not a ContextFitReader ...
    """
    if context_fit is None or isinstance(context_fit, ContextFitReader):
        return
    hint = ""
    if isinstance(context_fit, str):
        hint = "; pass the object: care_sdk.addons.add_ons('context-fit').context_fit, or ('context-fit=SPEC')"
    raise ConfigError(f"context_fit: {context_fit!r} is not a ContextFitReader (see care_sdk.addons){hint}")


def _items(items: Sequence[ScoreItem]) -> list[_Item]:
    """Each item with its context as messages (:func:`~care_sdk.types.as_messages`, which passes
    :data:`~care_sdk.types.Messages` as they are)."""
    return [(as_messages(context), reply) for context, reply in items]


def unwrap_outcome(outcome: tuple[RewardResult, CareError | None]) -> RewardResult:
    result, error = outcome
    if error is not None:
        raise error
    return result
