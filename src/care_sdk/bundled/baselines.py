# ruff: noqa: E501  (the conversations are data: one message to a line)
"""What context fit compares a reply against: the baseline pools by name, and how to draw your own.

The public names are :mod:`care_sdk.bundled.context_fit`'s (``from care_sdk.bundled.context_fit import
sample_baselines``); the gate fitted for each bundled pool lives there too
(:func:`care_sdk.bundled.context_fit.bundled_gate`). ``CONVERSATIONS`` holds the support conversations
written for this package (no dataset's text) behind :data:`SUPPORT_CONVERSATIONS`.

Examples:
    >>> len(CONVERSATIONS), all(c[-1][0] == "user" for c in CONVERSATIONS)
    (8, True)
    >>> named_baselines("neutral") == NEUTRAL, BASELINE_NAMES
    (True, ('neutral', 'support', 'esconv'))
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

from care_sdk.errors import ConfigError
from care_sdk.types import Context, Dialogue, Message, as_messages

CONVERSATIONS: tuple[tuple[tuple[str, str], ...], ...] = (
    (
        ("user", "hello"),
        ("assistant", "Hi there! How are you doing today?"),
        ("user", "not great to be honest. kind of a rough week"),
        ("assistant", "I'm sorry to hear that. Do you want to tell me what made it rough?"),
        ("user", "my landlord told me I have to move out by the end of next month and I have no idea where I'll go"),
    ),
    (
        ("user", "My son is 15 and lately he just shuts himself in his room and barely talks to me."),
        ("assistant", "That must feel lonely for you. How long has it been like this?"),
        ("user", "Since the start of the school year I think. When I ask how his day was he just says fine."),
        (
            "assistant",
            "Teenagers often pull away at that age, but it still hurts when it's your own child. Has anything changed at school?",
        ),
        ("user", "He switched schools because we moved. Maybe he misses his old friends, I never thought about that."),
    ),
    (
        ("user", "I keep putting off my thesis. I sit down to write and end up scrolling on my phone for hours."),
        ("assistant", "It sounds like you really want to get it done but something keeps pulling you away."),
        ("user", "Yes exactly. And then I feel guilty and that makes it even harder to start the next day."),
        ("assistant", "That guilt can turn into a loop. What part of the thesis feels hardest to start?"),
        ("user", "The literature review. There is so much to read and I don't know where to begin."),
        (
            "assistant",
            "When I have faced a pile like that, picking just three papers for one day helped me more than planning the whole thing.",
        ),
        ("user", "Three papers sounds doable. But my supervisor expects a full draft in two weeks."),
    ),
    (
        ("user", "I think I drink too much. It started as a glass of wine after work and now it's most of a bottle."),
        ("assistant", "Thank you for telling me that, it takes courage to say it out loud. How do you feel about it?"),
        ("user", "Ashamed mostly. Nobody knows, I always do it alone at home."),
        ("user", "I tried to stop for a week but I only lasted two days."),
    ),
    (
        ("user", "I've had insomnia for months. I lie awake until 3 or 4 and then I'm a wreck at work."),
        ("assistant", "Months of that would wear anyone down. What goes through your mind while you lie awake?"),
        ("user", "Everything. Bills, my mom's health, things I said in meetings."),
        ("assistant", "So your mind finally gets the quiet to go over all your worries at night."),
        ("user", "Yes, and I'm on my laptop until I go to bed, I know that doesn't help."),
        (
            "assistant",
            "Some people find it easier to write their worries down an hour before bed and put screens away after that. Would you be willing to try something like that?",
        ),
        ("user", "Maybe. I'm just scared nothing will work and I'll lose my job because I'm so tired."),
    ),
    (
        ("user", "Some girls in my class keep posting mean comments about how I look."),
        ("assistant", "That sounds really hurtful. How long has this been going on?"),
        ("user", "A few months. I don't even want to go to school anymore."),
        (
            "assistant",
            "It makes sense that you'd want to avoid the place where it happens. Have you been able to tell anyone, like a teacher or your parents?",
        ),
        ("user", "No, I'm afraid it will get worse if they find out I told."),
    ),
    (
        ("user", "My dad and I had a huge argument about my career. He wants me to take over the family shop."),
        ("assistant", "And it sounds like that's not what you want for yourself?"),
        ("user", "No, I want to be a nurse. He says I'm throwing away everything he built."),
        (
            "assistant",
            "You're caught between your own dream and not wanting to let him down. That's a heavy place to be.",
        ),
        ("user", "Exactly. I love him but I can't live his life."),
    ),
    (
        ("user", "My best friend is getting married and I'm supposed to be happy for her but I just feel left behind."),
        ("assistant", "It's okay to feel both happy for her and sad for yourself. What makes you feel left behind?"),
        ("user", "Everyone around me has a partner and a house and I'm still single and renting a tiny room."),
        ("assistant", "It sounds like you're measuring your life against theirs, and that comparison is painful."),
        ("user", "I guess so. I was doing fine until the engagement party."),
        ("assistant", "Something about that evening stirred all this up. What happened there?"),
        (
            "user",
            "Her aunt asked me when it would be my turn, in front of everyone. I laughed but I went home and cried.",
        ),
    ),
)
"""Eight short exchanges between a user and a supporter, on varied topics and at several stages of
a conversation, ``(role, content)`` in order, each ending with the user's message."""


NEUTRAL: tuple[Context, ...] = ("Hi.",)
"""The default baseline (``neutral``): one neutral user message, the setting
:data:`~care_sdk.bundled.context_fit.BUNDLED_GATE` was fitted with; two reads a reply.

Examples:
    >>> from care_sdk.bundled.context_fit import BUNDLED_GATE, NEUTRAL, bundled_gate
    >>> NEUTRAL, bundled_gate(NEUTRAL) == BUNDLED_GATE
    (('Hi.',), True)
"""

SUPPORT_CONVERSATIONS: tuple[tuple[Message, ...], ...] = tuple(
    tuple(Message(role=role, content=text) for role, text in conversation) for conversation in CONVERSATIONS
)
"""Eight short support conversations written for this package (a user and a supporter, on varied
topics and at several stages, each ending with the user's message), to pool as the baseline:
``ContextFit(baselines=SUPPORT_CONVERSATIONS)``. A reply that would suit any support conversation
is likely after them too, so it earns less evidence than against ``"Hi."`` (:data:`NEUTRAL`); each
reply then costs nine reads instead of two. Its gate is :data:`~care_sdk.bundled.context_fit.SUPPORT_GATE`.
With the bundled reward it tells a reply written for the conversation from another
conversation's reply more often than ``"Hi."`` does, and orders the Lend-an-Ear judge's pairs
worse; what it measured is in ``docs/research/context_fit.md``.

Examples:
    >>> len(SUPPORT_CONVERSATIONS), SUPPORT_CONVERSATIONS[0][-1].role
    (8, 'user')
"""


def esconv_contexts(data: str | Path | None = None) -> tuple[tuple[Message, ...], ...]:
    """Four contexts of ESConv's ``train`` split to pool as the baselines (``esconv``):
    ``sample_baselines(esconv_train, 4, seed=11)``, the last six messages before a supporter turn
    of four train dialogues, read from the data directory (``data``, else ``$CARE_DATA_DIR``; the
    package holds no dataset text). Their gate is :data:`~care_sdk.bundled.context_fit.ESCONV_GATE`.
    With the bundled reward they tell a reply written for the conversation from another
    conversation's reply best of the pools measured, at some cost on the Lend-an-Ear judge's pairs
    and against two-word evasive replies (``docs/research/context_fit.md``).

    Raises:
        ConfigError: no data directory, or no ESConv ``train.jsonl`` in it (the message says where
            to get it).

    Examples:
        >>> from care_sdk.bundled.context_fit import ESCONV_GATE, bundled_gate, esconv_contexts
        >>> pool = esconv_contexts()  # doctest: +SKIP
        >>> len(pool), [len(c) for c in pool], bundled_gate(pool) == ESCONV_GATE  # doctest: +SKIP
        (4, [6, 6, 6, 6], True)
    """
    from care_lab.data import data_dir, load_esconv
    from care_lab.training.roles import require_role

    path = data_dir(data) / "esconv" / "train.jsonl"
    if not path.is_file():
        raise ConfigError(f"{path}: not found; the esconv baselines are drawn from ESConv's train split there")
    require_role(path, "fit", what="context-fit baselines")
    return sample_baselines([d.to_dialogue() for d in load_esconv(path).records], 4, seed=11)


NAMED_BASELINES: dict[str, tuple[Context, ...]] = {
    "neutral": NEUTRAL,
    "support": SUPPORT_CONVERSATIONS,
}
"""The bundled baselines by the names the command line gives them (``--context-fit-baselines``):
``neutral`` is :data:`NEUTRAL`, ``support`` is :data:`SUPPORT_CONVERSATIONS`; each has a bundled
gate.

Examples:
    >>> {name: len(pool) for name, pool in NAMED_BASELINES.items()}
    {'neutral': 1, 'support': 8}
"""

BASELINE_NAMES: tuple[str, ...] = (*NAMED_BASELINES, "esconv")
"""Every name :func:`named_baselines` knows: the bundled pools, and ``esconv``
(:func:`esconv_contexts`, read from the data directory).

Examples:
    >>> BASELINE_NAMES
    ('neutral', 'support', 'esconv')
"""


DEFAULT_BASELINES = "neutral"
"""The name in :data:`BASELINE_NAMES` of what context fit compares a reply against unless told
otherwise: :class:`~care_sdk.bundled.context_fit.ContextFit`, :func:`~care_sdk.bundled.context_fit.context_fit_for`,
``--context-fit-baselines``, the policy recipe's ``reward.context_fit_baselines`` and the verl
plug-in all default to it.

Examples:
    >>> named_baselines(DEFAULT_BASELINES) == NEUTRAL
    True
"""


def baselines_name(name: str, where: str | None = "baselines") -> str:
    """``name`` if :func:`named_baselines` knows it (:data:`BASELINE_NAMES`), without reading any
    data: what a setting's validator checks (``where``: the setting, for the error; ``None`` for a
    caller that names it itself, such as a config's validator).

    Raises:
        ConfigError: no baselines have that name; the message names ``where`` and the choices.

    Examples:
        >>> baselines_name("esconv")
        'esconv'
        >>> baselines_name("pals", where="-b")
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: -b: unknown baselines 'pals'; choose one of neutral, support, esconv
    """
    if not isinstance(name, str) or name not in BASELINE_NAMES:
        place = f"{where}: " if where else ""
        raise ConfigError(f"{place}unknown baselines {name!r}; choose one of {', '.join(BASELINE_NAMES)}")
    return name


def named_baselines(name: str, where: str | None = "baselines", data: str | Path | None = None) -> tuple[Context, ...]:
    """The baselines called ``name`` (:data:`BASELINE_NAMES`): a bundled pool of
    :data:`NAMED_BASELINES`, or ``esconv`` (:func:`esconv_contexts`, read from the data directory
    ``data``, else ``$CARE_DATA_DIR``), for a setting that names them (``where``: the setting, for
    the error).

    Raises:
        ConfigError: no baselines have that name (see :func:`baselines_name`), or ``esconv``
            without ESConv in the data directory.

    Examples:
        >>> named_baselines("neutral")
        ('Hi.',)
    """
    if baselines_name(name, where) != "esconv":
        return NAMED_BASELINES[name]
    try:
        return esconv_contexts(data)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}" if where else str(exc)) from exc


def fingerprint(baselines: Sequence[Context]) -> str:
    """The SHA-256 of a pool's messages: how a pool is known without holding its text.

    Examples:
        >>> fingerprint(["Hi."]) == fingerprint([[{"role": "user", "content": "Hi."}]])
        True
    """
    text = repr([[(m.role, m.content) for m in b] for b in as_baselines(baselines)])
    return hashlib.sha256(text.encode()).hexdigest()


def sample_baselines(
    dialogues: Iterable[Dialogue], count: int = 4, seed: int = 0, window: int = 6, min_index: int = 3
) -> tuple[tuple[Message, ...], ...]:
    """``count`` contexts drawn from your own dialogues (seeded), to pool as the baselines: the last
    ``window`` messages before an assistant turn at position ``min_index`` or later. Contexts from
    the data a reward will score are the baseline that helped most on ESConv
    (``docs/research/context_fit.md``). Draw them from a training split, and fit their gate
    (:meth:`~care_sdk.bundled.context_fit.Gate.fit`) on held-out pairs.

    Raises:
        ValueError: fewer than ``count`` such turns.

    Examples:
        >>> chat = Dialogue(messages=[{"role": r, "content": f"m{i}"} for i, r in enumerate(["user", "assistant"] * 3)])
        >>> [[m.content for m in c] for c in sample_baselines([chat], count=2, window=2)]
        [['m3', 'm4'], ['m1', 'm2']]
    """
    turns = [t for d in dialogues for t in d.turns() if t.index >= min_index]
    if len(turns) < count:
        raise ValueError(f"sample_baselines: {count} contexts asked, only {len(turns)} assistant turns qualify")
    return tuple(tuple(t.context[-window:]) for t in random.Random(seed).sample(turns, count))


def as_baselines(baselines: Sequence[Context]) -> tuple[tuple[Message, ...], ...]:
    """A pool as tuples of messages (a string is one user message), comparable and hashable.

    Examples:
        >>> as_baselines(["Hi."])[0][0].role
        'user'
    """
    return tuple(tuple(as_messages(b)) for b in baselines)
