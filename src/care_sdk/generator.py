"""RubricGenerator: reads a dialogue context and writes the rubric for the next reply."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

from care_sdk._core import MAX_CRITERIA, PERSONA_CRITERIA_VERSION
from care_sdk.addons import WeightRead, WeightReader
from care_sdk.backends import Backend, GenerationRequest, TrainedAdapter, resolve_backend
from care_sdk.backends.base import Completion
from care_sdk.cache import MemoryCache, RubricCache, context_key
from care_sdk.errors import CareError, ConfigError
from care_sdk.plans import Plan, adrive, drive, fewer_messages, parse_plan, retry_request, unwrap
from care_sdk.profiles import ProfileLike, ProfileReader, UserProfile, as_profile, as_profiles
from care_sdk.prompts import (
    GENERATOR_PROMPT_VERSION,
    PROFILE_PROMPT_VERSION,
    generator_messages,
    parse_rubric,
    rubric_schema,
    shown_messages,
)
from care_sdk.provenance import Cost, RubricSpend, Tally, active_ledger
from care_sdk.types import (
    DIMENSIONS,
    Context,
    Criterion,
    CriterionRepair,
    Message,
    Messages,
    Rubric,
    as_messages,
    fixed_criteria,
    persona_criteria,
)

__all__ = ["RubricGenerator"]


class RubricGenerator(ProfileReader):
    """Writes a turn-level rubric (weights and criteria per dimension) for a dialogue context.

    Rubrics are cached by context (see :mod:`care_sdk.cache`), so every reply to the same
    context is judged against the same rubric and the backend is called once per context.

    Args:
        backend: a spec string (``"default"``, ``"llamacpp:PATH"``, ``"openai:MODEL@URL"``, ...),
            a :class:`~care_sdk.backends.Backend`, or a model object such as ``llama_cpp.Llama``.
        criteria_per_dimension: criteria asked for per dimension (the reference setting is 2).
        temperature: sampling temperature (0 is greedy).
        seed: sampling seed, for backends that support one.
        max_tokens: upper bound on the rubric reply length.
        max_attempts: replies tried per context before giving up with :class:`OutputError`.
        cache: ``True`` for an in-memory LRU cache, ``False``/``None`` for none, or a
            :class:`~care_sdk.cache.RubricCache` (e.g. shared or persistent).
        max_context_messages: show the model only the last this many messages (the prompt still
            states the reply's position). Default: the setting a trained generator adapter on the
            backend was trained with, else the whole context. A prompt that does not fit the
            model's context window (:class:`~care_sdk.errors.ContextOverflowError`) is sent again
            with fewer messages, the oldest dropped first, down to the last one.
        weight_reader: an opt-in add-on outside the method that reads the rubric's weights another
            way (a :class:`~care_sdk.addons.WeightReader`; the criteria stay the decoded reply's).
            ``None`` (the default, on every backend) keeps the weights the model wrote. The package
            ships two for its bundled generator, in the bundled area: a weights head on the model's
            hidden states and expected weights over 0-10 (``care score --add-on weights-head`` or
            ``--add-on expected-weights``; :func:`care_sdk.addons.add_ons` builds them by name).
        check_criteria: check every criterion of a decoded rubric for what a person could not read
            as written (:func:`care_sdk.rubric_checks.criteria_defects`: a word repeated in a row,
            an unfilled slot such as ``{topic}``, a garbled slot fill, a copy of another
            criterion). On by default, for every backend (a capable model never trips it);
            ``False`` keeps the criteria as decoded.
        criteria_retries: with ``check_criteria``, how many more rubric replies are asked for
            (each with a new seed, and some temperature when the first was greedy) to take a
            readable criterion of the same dimension from, in place of a defective one. What is
            still defective after them is replaced by the fixed criterion of its dimension
            (:func:`~care_sdk.types.fixed_criteria`). The rubric keeps the first reply's weights
            and lists every replacement in :attr:`Rubric.repairs <care_sdk.types.Rubric.repairs>`.
        persona_criteria: add the persona-consistency criteria (:func:`~care_sdk.types.persona_criteria`,
            one per dimension) to the rubric of every context that comes with a user profile
            (:mod:`care_sdk.profiles`). Off by default; a context without a profile is never given them.

    A context may come with a user profile (``profile=``; ``profiles=`` in batch calls, one per
    context): it is quoted in the prompt's profile version and is part of the rubric's cache key
    (:func:`~care_sdk.cache.context_key`); without one, prompt and key are what they always were. A
    backend that carries a trained adapter (the bundled ``default`` generator), and a generator with
    a ``weight_reader``, drop the profile (:attr:`reads_profiles` is ``False``): they were trained on
    the prompt without one. The first dropped profile is logged as a warning.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend, rubric_json
        >>> gen = RubricGenerator(ScriptedBackend([rubric_json({"cognitive": 3, "affective": 1, "proactive": 0})]))
        >>> rubric = gen.generate([{"role": "user", "content": "I keep failing my driving test."}])
        >>> [(d.value, w) for d, w in rubric.weights.items()]
        [('cognitive', 0.75), ('affective', 0.25), ('proactive', 0.0)]
        >>> gen.generate([{"role": "user", "content": "I keep failing my driving test."}]) == rubric  # cached
        True

        A criterion nobody can read is asked for again, then replaced by a fixed one:

        >>> criteria = {"cognitive": ["Asks about the test.", "Asks about the the test."],
        ...             "affective": ["Names the fear."], "proactive": ["Offers one step."]}
        >>> gen = RubricGenerator(ScriptedBackend([rubric_json({"cognitive": 1, "affective": 1, "proactive": 1},
        ...                                                    criteria)] * 3))
        >>> repair = gen.generate("I keep failing my driving test.").repairs[0]
        >>> repair.original, repair.defect, repair.source
        ('Asks about the the test.', 'repeated_word', 'fixed')

        With a profile, the prompt quotes it and the rubric is cached apart:

        >>> gen = RubricGenerator(ScriptedBackend([rubric_json({"cognitive": 1, "affective": 1, "proactive": 1})] * 2),
        ...                       persona_criteria=True)
        >>> plain = gen.generate("I keep failing my driving test.")
        >>> grounded = gen.generate("I keep failing my driving test.", profile="A retired bus driver.")
        >>> len(plain.criteria), len(grounded.criteria)
        (6, 9)
        >>> "A retired bus driver." in gen.backend.requests[-1].messages[1].content
        True
    """

    def __init__(
        self,
        backend: str | Backend | Any = "default",
        *,
        criteria_per_dimension: int = 2,
        temperature: float = 0.0,
        seed: int | None = 0,
        max_tokens: int = 512,
        max_attempts: int = 3,
        cache: RubricCache | bool | None = True,
        max_context_messages: int | None = None,
        weight_reader: WeightReader | None = None,
        check_criteria: bool = True,
        criteria_retries: int = 2,
        persona_criteria: bool = False,
    ) -> None:
        if criteria_per_dimension < 1:
            raise ConfigError("criteria_per_dimension must be at least 1")
        if persona_criteria and len(DIMENSIONS) * (criteria_per_dimension + 1) > MAX_CRITERIA:
            raise ConfigError(
                f"persona_criteria: {criteria_per_dimension} criteria per dimension plus one persona criterion "
                f"make more than {MAX_CRITERIA} criteria"
            )
        if max_attempts < 1:
            raise ConfigError("max_attempts must be at least 1")
        if criteria_retries < 0:
            raise ConfigError("criteria_retries must be at least 0")
        if max_context_messages is not None and max_context_messages < 1:
            raise ConfigError("max_context_messages must be at least 1")
        if weight_reader is not None and not isinstance(weight_reader, WeightReader):
            raise ConfigError(
                f"weight_reader: a {type(weight_reader).__name__} is not a WeightReader (see care_sdk.addons)"
            )
        self.backend = resolve_backend(backend, role="generator")
        if weight_reader is not None:
            weight_reader.check(self.backend, prompt_version=GENERATOR_PROMPT_VERSION)
        adapter = self.backend.adapter if isinstance(self.backend, TrainedAdapter) else None
        if adapter is not None:
            adapter.require(role="generator", prompt_version=GENERATOR_PROMPT_VERSION)
            if max_context_messages is None:
                max_context_messages = adapter.max_context_messages
        self.max_context_messages = max_context_messages
        self.weight_reader = weight_reader
        """The add-on that reads the rubric's weights, or ``None`` for the weights the model wrote."""
        self.criteria_per_dimension = criteria_per_dimension
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.max_attempts = max_attempts
        self.check_criteria = check_criteria
        self.criteria_retries = criteria_retries
        self.cache: RubricCache | None = MemoryCache() if cache is True else (None if cache is False else cache)
        self.persona_criteria = persona_criteria
        self.reads_profiles = adapter is None and weight_reader is None
        self._schema = rubric_schema(criteria_per_dimension)

    prompt_version: str = GENERATOR_PROMPT_VERSION
    """The version of the generator prompt (:data:`~care_sdk.prompts.GENERATOR_PROMPT_VERSION`)."""

    @property
    def identity(self) -> str:
        """Backend identity, prompt version and sampling settings: everything that shapes a rubric."""
        return self._identity(GENERATOR_PROMPT_VERSION)

    def _identity(self, version: str) -> str:
        return (
            f"{self.backend.identity}|prompt=generator-{version}|k={self.criteria_per_dimension}"
            f"|t={self.temperature}|seed={self.seed}|max_tokens={self.max_tokens}|keep={self.max_context_messages}"
            + (f"|checked=r{self.criteria_retries}" if self.check_criteria else "")
            + (f"|weights={self.weight_reader.identity}" if self.weight_reader is not None else "")
        )

    def cache_key(self, context: Context, profile: ProfileLike = None) -> str:
        """The rubric cache key of ``context`` (and the user's ``profile``): with a profile the
        generator's identity names the profile prompt (and the persona criteria when on) and the
        key hashes the profile; without one it is the key it always was.

        Examples:
            >>> from care_sdk.testing import ScriptedBackend
            >>> gen = RubricGenerator(ScriptedBackend([]))
            >>> gen.cache_key("I failed.") == gen.cache_key("I failed.", profile="A nurse.")
            False
        """
        return self._key(as_messages(context), self.read_profile(as_profile(profile)))

    def _key(self, context: Messages, profile: UserProfile | None) -> str:
        if profile is None:
            return context_key(context, self.identity)
        identity = self._identity(PROFILE_PROMPT_VERSION)
        if self.persona_criteria:
            identity += f"|persona={PERSONA_CRITERIA_VERSION}"
        return context_key(context, identity, profile)

    def request(self, context: Context, profile: ProfileLike = None) -> GenerationRequest:
        """The backend request for one context (useful to inspect or log the exact prompt)."""
        read = self.read_profile(as_profile(profile))
        return self._request(as_messages(context), self.max_context_messages, read)

    def _request(
        self, context: Sequence[Message], keep: int | None, profile: UserProfile | None = None
    ) -> GenerationRequest:
        return GenerationRequest(
            messages=tuple(
                generator_messages(context, self.criteria_per_dimension, max_context_messages=keep, profile=profile)
            ),
            json_schema=self._schema,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=self.seed,
        )

    def _plan(self, contexts: Sequence[Messages], profiles: Sequence[UserProfile | None]) -> Plan[Rubric]:
        """The rubrics of contexts that are messages already, each with its normalised profile
        (``None``: none), as a plan for the engine.

        Inside a reward (a :class:`~care_sdk.provenance.Ledger` open), it reports one
        :class:`~care_sdk.provenance.RubricSpend` per context: whether its rubric was written or read
        from the cache, what writing it cost (every request for it: parse retries, criteria retries,
        and one call per weight read), and how many contexts of the batch shared it."""
        read = [self.read_profile(p) for p in profiles]
        keys = [self._key(m, p) for m, p in zip(contexts, read, strict=True)]
        found: dict[str, Rubric | CareError] = {}
        todo: dict[str, tuple[Messages, UserProfile | None]] = {}
        for key, context, profile in zip(keys, contexts, read, strict=True):
            if key in found or key in todo:
                continue
            cached = self.cache.get(key) if self.cache is not None else None
            if cached is not None:
                found[key] = cached
            else:
                todo[key] = (context, profile)
        tallies = [Tally() for _ in todo]
        if todo:

            def parse(_: int, completion: Completion) -> Rubric:
                return parse_rubric(completion.text)

            contexts_todo = [context for context, _ in todo.values()]
            profiles_todo = [profile for _, profile in todo.values()]
            fewer = fewer_messages(  # a context that does not fit the window: its oldest messages dropped
                lambda i: shown_messages(contexts_todo[i], self.max_context_messages),
                lambda i, keep: self._request(contexts_todo[i], keep, profiles_todo[i]),
            )
            sent = [
                self._request(c, self.max_context_messages, p)
                for c, p in zip(contexts_todo, profiles_todo, strict=True)
            ]

            def shorter(i: int) -> GenerationRequest | None:
                smaller = fewer(i)
                if smaller is not None:
                    sent[i] = smaller  # the weights are read on the messages the rubric was written on
                return smaller

            requests = list(sent)
            outcomes = yield from parse_plan(
                requests, parse, what="rubric", max_attempts=self.max_attempts, shorter=shorter, tallies=tallies
            )
            if self.check_criteria:
                outcomes = yield from self._repaired(outcomes, sent, parse, tallies)
            if self.weight_reader is not None:
                outcomes = yield from self._reweighted(outcomes, contexts_todo, sent, tallies)
            if self.persona_criteria:
                outcomes = [
                    _with_persona(o) if p is not None and isinstance(o, Rubric) else o
                    for o, p in zip(outcomes, profiles_todo, strict=True)
                ]
            for key, outcome in zip(todo, outcomes, strict=True):
                found[key] = outcome
                if self.cache is not None and isinstance(outcome, Rubric):
                    self.cache.put(key, outcome)
        ledger = active_ledger()
        if ledger is not None:
            written = dict(zip(todo, tallies, strict=True))
            shared = Counter(keys)
            spends = [RubricSpend("cached", Cost(), shared[k]) for k in keys]
            for j, key in enumerate(keys):
                tally = written.get(key)
                if tally is not None:
                    spends[j] = RubricSpend("generated", tally.cost(), shared[key])
            ledger.rubrics = spends
        return [found[k] for k in keys]

    def _repaired(
        self,
        outcomes: list[Rubric | CareError],
        sent: list[GenerationRequest],
        parse: Callable[[int, Completion], Rubric],
        tallies: list[Tally],
    ) -> Plan[Rubric]:
        """The parsed rubrics with their defective criteria repaired: from retries, else the fixed ones."""
        from care_sdk.rubric_checks import criteria_defects  # loaded on the first rubric, not by import care_sdk

        repairs = {
            i: _Repair(r) for i, r in enumerate(outcomes) if isinstance(r, Rubric) and any(criteria_defects(_texts(r)))
        }
        for attempt in range(1, self.criteria_retries + 1):
            pending = [i for i, repair in repairs.items() if repair.open()]
            if not pending:
                break
            # seeds past those of the parse retries, so no retry repeats a reply already read
            requests = [retry_request(sent[i], self.max_attempts + attempt) for i in pending]
            retried = yield from parse_plan(
                requests, parse, what="rubric", max_attempts=1, tallies=[tallies[i] for i in pending]
            )
            for i, rubric in zip(pending, retried, strict=True):
                if isinstance(rubric, Rubric):  # a retry that fails leaves the criteria to the fixed ones
                    repairs[i].take(rubric.criteria, "retry")
        out = list(outcomes)
        for i, repair in repairs.items():
            repair.take(fixed_criteria(), "fixed")
            out[i] = repair.rubric()
        return out

    def _reweighted(
        self,
        outcomes: list[Rubric | CareError],
        contexts: list[Messages],
        sent: list[GenerationRequest],
        tallies: list[Tally],
    ) -> Plan[Rubric]:
        """The parsed rubrics with the weight reader's weights (an item whose read fails is the error);
        each read counts as one call, the reads' wall time split evenly among them."""
        assert self.weight_reader is not None
        parsed = [i for i, outcome in enumerate(outcomes) if isinstance(outcome, Rubric)]
        if not parsed:
            return outcomes
        reads = [WeightRead(context=contexts[i], request=sent[i]) for i in parsed]
        started = time.perf_counter()
        read = yield from self.weight_reader.read(reads, self.backend)
        share = (time.perf_counter() - started) / len(parsed)
        for i in parsed:
            tallies[i].add({}, share)
        out = list(outcomes)
        for i, weights in zip(parsed, read, strict=True):
            rubric = out[i]
            assert isinstance(rubric, Rubric)
            out[i] = weights if isinstance(weights, CareError) else rubric.with_weights(weights)
        return out

    def generate(self, context: Context, profile: ProfileLike = None) -> Rubric:
        """Write the rubric for the reply that follows ``context`` (said to the user ``profile`` describes).

        Raises:
            InputError: ``profile`` is not a profile (see :func:`~care_sdk.profiles.as_profile`).
            OutputError: no reply parsed as a valid rubric within ``max_attempts``.
            BackendError: the backend failed.
        """
        return unwrap(self.generate_batch([context], [profile])[0])

    def generate_batch(
        self, contexts: Sequence[Context], profiles: Sequence[ProfileLike] | None = None
    ) -> list[Rubric | CareError]:
        """Write one rubric per context, in order; a failed item is its :class:`CareError`, not an exception.

        ``profiles``, when given, holds one user profile (or ``None``) per context. Identical
        contexts with equal profiles share one backend request. Each context is normalised here
        (:func:`~care_sdk.types.as_messages`; :data:`~care_sdk.types.Messages` pass as they are).

        Raises:
            InputError: ``profiles`` has another length than ``contexts``, or an entry is not a profile.
        """
        return drive(self._plan([as_messages(c) for c in contexts], as_profiles(profiles, len(contexts))), self.backend)

    async def agenerate(self, context: Context, profile: ProfileLike = None) -> Rubric:
        """Async form of :meth:`generate`."""
        return unwrap((await self.agenerate_batch([context], [profile]))[0])

    async def agenerate_batch(
        self, contexts: Sequence[Context], profiles: Sequence[ProfileLike] | None = None
    ) -> list[Rubric | CareError]:
        """Async form of :meth:`generate_batch`."""
        return await adrive(
            self._plan([as_messages(c) for c in contexts], as_profiles(profiles, len(contexts))), self.backend
        )

    def __repr__(self) -> str:
        return f"RubricGenerator({self.backend!r}, criteria_per_dimension={self.criteria_per_dimension})"


def _with_persona(rubric: Rubric) -> Rubric:
    """``rubric`` with the persona-consistency criteria added, one per dimension after its own."""
    return Rubric(weights=rubric.weights, criteria=rubric.criteria + persona_criteria(), repairs=rubric.repairs)


def _texts(rubric: Rubric) -> list[str]:
    return [c.text for c in rubric.criteria]


class _Repair:
    """One rubric's criteria while its defective ones are replaced, slot by slot.

    Examples:
        >>> rubric = Rubric(weights={"cognitive": 1, "affective": 1, "proactive": 1}, criteria=[
        ...     Criterion(dimension="cognitive", text="Asks about {topic}."),
        ...     Criterion(dimension="affective", text="Names the fear."),
        ...     Criterion(dimension="proactive", text="Offers one step.")])
        >>> repair = _Repair(rubric)
        >>> repair.open()
        [0]
        >>> repair.take([Criterion(dimension="cognitive", text="Asks what the exam means to them.")], "retry")
        >>> [c.text for c in repair.rubric().criteria_for("cognitive")], repair.open()
        (['Asks what the exam means to them.'], [])
    """

    def __init__(self, rubric: Rubric) -> None:
        from care_sdk.rubric_checks import criteria_defects

        self.first = rubric
        self.criteria: list[Criterion] = list(rubric.criteria)
        self.defects = criteria_defects(_texts(rubric))
        self.repairs: dict[int, CriterionRepair] = {}

    def open(self) -> list[int]:
        """The slots still holding a defective criterion."""
        return [j for j, defect in enumerate(self.defects) if defect is not None]

    def take(self, candidates: Sequence[Criterion], source: Literal["retry", "fixed"]) -> None:
        """Fill each open slot with the first candidate of its dimension that is readable and no
        copy of another criterion of the rubric."""
        from care_sdk.rubric_checks import criterion_defect, same_criterion

        for j in self.open():
            dimension = self.criteria[j].dimension
            others = [c.text for k, c in enumerate(self.criteria) if k != j]
            for candidate in candidates:
                if candidate.dimension is not dimension or criterion_defect(candidate.text) is not None:
                    continue
                if any(same_criterion(candidate.text, other) for other in others):
                    continue
                self._note(j, candidate.text, source)
                self.criteria[j] = candidate
                break

    def _note(self, j: int, replacement: str | None, source: Literal["retry", "fixed", "dropped"]) -> None:
        defect = self.defects[j]
        assert defect is not None
        original = self.first.criteria[j]
        self.repairs[j] = CriterionRepair(
            dimension=original.dimension, original=original.text, defect=defect, replacement=replacement, source=source
        )
        self.defects[j] = None

    def rubric(self) -> Rubric:
        """The repaired rubric: the first reply's weights; a slot nothing could fill is dropped (its
        dimension keeps the criteria that fill its other slots)."""
        dropped = self.open()
        for j in dropped:
            self._note(j, None, "dropped")
        criteria = [c for j, c in enumerate(self.criteria) if j not in dropped]
        return Rubric(
            weights=self.first.weights,
            criteria=criteria,
            repairs=tuple(self.repairs[j] for j in sorted(self.repairs)),
        )
