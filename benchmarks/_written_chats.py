# ruff: noqa: E501  (the conversations are data: one message to a line)
"""A candidate context-fit baseline that was measured and not kept: four windows of six messages
from the middle of peer-support chats, written for this benchmark (no dataset's text) in the
informal style of ESConv, to stand in for the ESConv train contexts the package cannot carry.
Against them the bundled reward gained over "Hi." on ESConv valid by an interval that holds 0
(0.829 against 0.787, paired +0.042 [-0.033, 0.121]) and ordered 0.627 of the Lend-an-Ear
selection pairs, below the 0.65 bar (``docs/research/context_fit.md``, "How the default was
chosen"). Read with ``bench_evaluator.py --baselines chats`` (its gate is fitted on the run's
valid pairs).
"""

from __future__ import annotations

from care_sdk.types import Message

_TEXT: tuple[tuple[tuple[str, str], ...], ...] = (
    (
        ("assistant", "That sounds really stressful. How long have you been looking for a new job?"),
        ("user", "almost 3 months now. i got laid off when the restaurant closed because of covid"),
        (
            "assistant",
            "I'm sorry, losing your job like that is not your fault at all. How are you managing with the bills right now?",
        ),
        ("user", "not good honestly. my savings are almost gone and i dont want to ask my parents for money again"),
        (
            "assistant",
            "It sounds like you feel a lot of pressure to handle this alone. Have you looked into unemployment benefits where you live?",
        ),
        ("user", "I applied but its taking forever\nI just feel useless sitting at home all day"),
    ),
    (
        ("assistant", "Hi, how are you feeling today?"),
        ("user", "Pretty bad. My girlfriend broke up with me last week after 4 years together"),
        (
            "assistant",
            "Oh, I'm so sorry to hear that. Four years is a long time, it must hurt a lot. Do you know why she ended it?",
        ),
        ("user", "She said we grew apart and she wants different things. I didnt see it coming at all"),
        (
            "assistant",
            "That must have been such a shock, especially when you thought things were okay. Have you been able to talk to anyone about it?",
        ),
        ("user", "Not really, most of our friends are her friends too so it feels awkward"),
    ),
    (
        (
            "assistant",
            "I can hear how worried you are about the exams. What subject is giving you the most trouble?",
        ),
        ("user", "Math mostly. I failed the last test and if i fail the final i have to repeat the year"),
        (
            "assistant",
            "That's a lot of pressure to carry. I remember feeling the same before my finals, as if everything depended on one test.",
        ),
        ("user", "yes exactly and my parents keep asking about my grades which makes it worse"),
        (
            "assistant",
            "It sounds like you are worried about letting them down as well. Have you told them how stressed you feel?",
        ),
        ("user", "No, they would just say i need to study harder. I already study every night until late"),
    ),
    (
        ("assistant", "Do you want to tell me more about what happened with your friend?"),
        ("user", "We had an argument over text about something stupid and now she is ignoring me"),
        (
            "assistant",
            "That sounds hurtful, especially if she is someone close to you. How long have you two been friends?",
        ),
        ("user", "Since middle school. She is basically my only close friend here"),
        (
            "assistant",
            "So this feels like a big loss, not just a small fight. What do you think would happen if you reached out to her first?",
        ),
        ("user", "I am scared she will just ignore me again\nand then i will know its really over"),
    ),
)

CHATS: tuple[tuple[Message, ...], ...] = tuple(tuple(Message(role=r, content=t) for r, t in chat) for chat in _TEXT)
"""The four chats (a lost job, a breakup, exams, a fight with a friend), a supporter's message first."""
