"""Forced replies: build a reply whose text is fixed except for a few slots, by scoring the slots.

An evaluator's reply, ``{"scores": {"c1": 4, "c2": 3, ...}}``, is fixed by its schema except for
the digits. Instead of decoding it token by token, a backend that can read the model's next-token
distribution feeds the fixed text up to each slot and scores the choices there; the shared prompt
is evaluated once and reused (a KV cache), so a reply costs the candidate's tokens plus one short
step per slot.

The logic here is independent of any model: a backend supplies ``tokenize`` (text to token ids
with the end offset of each token) and ``next_logprobs`` (log-probabilities of some tokens after a
sequence of ids). Token boundaries are never assumed: for every choice the exact text up to the end
of the next fixed segment is tokenised, and the choice's tokens are those from where the choices'
tokenisations part to the token that holds the choice's last byte. A tokeniser that writes
``" 4"`` as one token, or merges the digit with the comma after it, or spells a choice in two
tokens, is handled the same way; a multi-token choice is scored by the sum of its tokens' logprobs.

Examples:
    >>> forced = ForcedReply(segments=("a=", ";"), choices=("1", "2"))
    >>> def tokenize(text):  # one token per character
    ...     return [ord(ch) for ch in text], list(range(1, len(text) + 1))
    >>> def next_logprobs(ids, wanted):  # a model that prefers "2"
    ...     return [-0.1 if w == ord("2") else -2.3 for w in wanted]
    >>> built = build_forced_reply(forced, [0], tokenize, next_logprobs)
    >>> built.text, built.picks
    ('a=2;', (1,))
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from care_sdk.backends.base import Completion, ForcedReply, TokenLogprob

__all__ = [
    "BuiltReply",
    "ChoiceTokens",
    "NextLogprobs",
    "Tokenize",
    "build_forced_reply",
    "choice_tokens",
    "common_prefix",
    "forced_completion",
]

Tokenize = Callable[[str], tuple[Sequence[int], Sequence[int]]]
"""``tokenize(text) -> (ids, ends)``: the token ids of ``text`` (no special tokens, no BOS) and, for
each token, the UTF-8 byte offset in ``text`` where it ends."""
NextLogprobs = Callable[[Sequence[int], Sequence[int]], Sequence[float]]
"""``next_logprobs(ids, wanted) -> logprobs``: the model's log-probability (over the whole
vocabulary) of each token in ``wanted`` right after the sequence ``ids``."""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of two token sequences.

    Examples:
        >>> common_prefix([1, 2, 3], [1, 2, 4, 5]), common_prefix([], [1])
        (2, 0)
    """
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class ChoiceTokens:
    """How the choices of one slot are spelled in tokens after the same text.

    Examples:
        >>> ChoiceTokens(shared=(5, 6), options=((7,), (8, 9))).options[1]
        (8, 9)
    """

    shared: tuple[int, ...]
    """Tokens every choice's text starts with (the fixed text up to the slot, as the choices tokenise it)."""
    options: tuple[tuple[int, ...], ...]
    """For each choice, the tokens after ``shared`` up to the one that holds the choice's last byte."""


def choice_tokens(tokenize: Tokenize, head: str, choices: Sequence[str], tail: str) -> ChoiceTokens:
    """Tokenise ``head + choice + tail`` for every choice and find where the choices' tokens part.

    ``tail`` is the fixed text after the slot: a tokeniser may merge the choice with it (``"4,"``),
    and then the merged token is the choice's token.

    Raises:
        ValueError: a choice that cannot be told apart from the others in tokens, or tokens that do
            not cover the text.

    Examples:
        A tokeniser that writes a space and a digit as one token (like GPT-2's):

        >>> vocab = {'"c1":': 1, " 1": 2, " 2": 3, ",": 4, " ": 5}
        >>> def tokenize(text):
        ...     pieces = ['"c1":', text[5:7], text[7:]] if text[5:7] in vocab else ['"c1":', " ", text[6:]]
        ...     ids, ends, end = [], [], 0
        ...     for piece in pieces:
        ...         end += len(piece)
        ...         ids.append(vocab.get(piece, 0)); ends.append(end)
        ...     return ids, ends
        >>> choice_tokens(tokenize, '"c1": ', ["1", "2"], ",")
        ChoiceTokens(shared=(1,), options=((2,), (3,)))
    """
    spelled = []
    for choice in choices:
        ids, ends = tokenize(head + choice + tail)
        if len(ids) != len(ends) or not ends or ends[-1] < len((head + choice + tail).encode("utf-8")):
            raise ValueError(f"the tokens of {head + choice + tail!r} do not cover the text")
        target = len((head + choice).encode("utf-8"))
        last = next(i for i, end in enumerate(ends) if end >= target)
        spelled.append(tuple(ids[: last + 1]))
    shared = len(spelled[0])
    for ids in spelled[1:]:
        shared = min(shared, common_prefix(spelled[0], ids))
    options = tuple(ids[shared:] for ids in spelled)
    if len(set(options)) != len(options) or not all(options):
        raise ValueError(f"the choices {list(choices)} cannot be told apart in tokens after {head!r}")
    return ChoiceTokens(shared=spelled[0][:shared], options=options)


@dataclass(frozen=True)
class BuiltReply:
    """A forced reply with the distribution each slot was picked from.

    Examples:
        >>> built = BuiltReply(text="a=2;", picks=(1,), distributions=((0.2, 0.8),), choices=("1", "2"))
        >>> built.picked
        ('2',)
    """

    text: str
    """The whole reply, fixed segments and picks."""
    picks: tuple[int, ...]
    """For each slot, the index of the picked choice."""
    distributions: tuple[tuple[float, ...], ...]
    """For each slot, the probability of each choice, renormalised over the choices."""
    choices: tuple[str, ...]
    """The choices, in the order of the distributions."""

    @property
    def picked(self) -> tuple[str, ...]:
        """The picked choices' text, slot by slot."""
        return tuple(self.choices[i] for i in self.picks)


def _restricted(logprobs: Sequence[float]) -> tuple[float, ...]:
    top = max(logprobs)
    if top == -math.inf:
        raise ValueError("the model gives every choice zero probability")
    weights = [math.exp(lp - top) for lp in logprobs]
    total = sum(weights)
    return tuple(w / total for w in weights)


def _pick(distribution: Sequence[float], temperature: float, rng: random.Random | None) -> int:
    if temperature <= 0 or rng is None:
        return max(range(len(distribution)), key=lambda i: (distribution[i], -i))  # first of equal maxima
    weights = [p ** (1.0 / temperature) if p > 0 else 0.0 for p in distribution]
    return rng.choices(range(len(distribution)), weights=weights)[0]


def _score(prompt: Sequence[int], tokens: ChoiceTokens, next_logprobs: NextLogprobs) -> list[float]:
    """Sum of each option's token logprobs; one model call per distinct prefix, shortest first."""
    wanted: dict[tuple[int, ...], set[int]] = {}
    for option in tokens.options:
        for j, token in enumerate(option):
            wanted.setdefault(option[:j], set()).add(token)
    answers: dict[tuple[tuple[int, ...], int], float] = {}
    base = [*prompt, *tokens.shared]
    for prefix in sorted(wanted, key=lambda p: (len(p), p)):
        ask = sorted(wanted[prefix])
        for token, logprob in zip(ask, next_logprobs([*base, *prefix], ask), strict=True):
            answers[(prefix, token)] = float(logprob)
    return [sum(answers[(option[:j], t)] for j, t in enumerate(option)) for option in tokens.options]


def build_forced_reply(
    forced: ForcedReply,
    prompt: Sequence[int],
    tokenize: Tokenize,
    next_logprobs: NextLogprobs,
    *,
    temperature: float = 0.0,
    seed: int | None = None,
) -> BuiltReply:
    """Build the reply slot by slot: score the choices after the text so far, pick one, go on.

    The reply's text is tokenised on its own and placed right after ``prompt`` (the token ids of
    the rendered chat prompt, up to where the assistant's reply starts). Greedy (``temperature``
    0) picks the most likely choice, the first of equal ones; otherwise a choice is drawn from the
    restricted distribution sharpened by ``1 / temperature`` with ``random.Random(seed)``.

    Raises:
        ValueError: the choices cannot be told apart in tokens, or the model gives them all
            probability zero.

    Examples:
        >>> forced = ForcedReply(segments=("x", "y", "."), choices=("a", "b"))
        >>> def tokenize(text):
        ...     return [ord(ch) for ch in text], list(range(1, len(text) + 1))
        >>> def next_logprobs(ids, wanted):  # prefers "b" first, then "a"
        ...     return [0.0 if (w == ord("b")) == (ids[-1] == ord("x")) else -1.0 for w in wanted]
        >>> built = build_forced_reply(forced, [], tokenize, next_logprobs)
        >>> built.text, [round(d[0], 3) for d in built.distributions]
        ('xbya.', [0.269, 0.731])
    """
    rng = random.Random(seed) if temperature > 0 else None
    text = ""
    picks: list[int] = []
    distributions: list[tuple[float, ...]] = []
    for slot in range(forced.slots):
        head = text + forced.segments[slot]
        tokens = choice_tokens(tokenize, head, forced.choices, forced.segments[slot + 1])
        distribution = _restricted(_score(prompt, tokens, next_logprobs))
        pick = _pick(distribution, temperature, rng)
        picks.append(pick)
        distributions.append(distribution)
        text = head + forced.choices[pick]
    return BuiltReply(
        text=text + forced.segments[-1],
        picks=tuple(picks),
        distributions=tuple(distributions),
        choices=forced.choices,
    )


def forced_completion(built: BuiltReply, forced: ForcedReply) -> Completion:
    """The :class:`Completion` a backend returns for a forced reply.

    Its ``logprobs`` spell the text: each fixed segment with logprob 0, and each slot's pick with
    its logprob and, as ``top``, every choice's logprob, all renormalised over the choices (so
    :func:`care_sdk.evaluator.expected_scores` reads the distribution as from decoded logprobs).

    Examples:
        >>> forced = ForcedReply(segments=("a=", ";"), choices=("1", "2"))
        >>> built = BuiltReply(text="a=2;", picks=(1,), distributions=((0.25, 0.75),), choices=("1", "2"))
        >>> completion = forced_completion(built, forced)
        >>> [t.token for t in completion.logprobs], round(math.exp(completion.logprobs[1].logprob), 2)
        (['a=', '2', ';'], 0.75)
    """
    pieces: list[TokenLogprob] = []
    for slot, (pick, distribution) in enumerate(zip(built.picks, built.distributions, strict=True)):
        if forced.segments[slot]:
            pieces.append(TokenLogprob(token=forced.segments[slot], logprob=0.0))
        logprobs = [math.log(p) if p > 0 else -math.inf for p in distribution]
        top = tuple(sorted(zip(forced.choices, logprobs, strict=True), key=lambda pair: -pair[1]))
        pieces.append(TokenLogprob(token=forced.choices[pick], logprob=logprobs[pick], top=top))
    if forced.segments[-1]:
        pieces.append(TokenLogprob(token=forced.segments[-1], logprob=0.0))
    return Completion(text=built.text, finish_reason="stop", logprobs=tuple(pieces))
