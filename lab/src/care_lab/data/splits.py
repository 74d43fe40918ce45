"""Splits by conversation: a seeded hash of the dialogue id, and the one held-out split of Lend-an-Ear.

The corpora without their own splits (Lend-an-Ear) are split here, once: ``care train build-data``
(preference pairs, evaluator targets) trains only on :func:`lend_an_ear_split` ``== "train"``, and
every evaluation that claims held-out numbers on Lend-an-Ear (``care bench quality --tasks
pairwise``, the evaluator benchmark) reads only the other conversations.
"""

from __future__ import annotations

import hashlib

__all__ = ["LEND_AN_EAR_HELD_OUT", "lend_an_ear_role", "lend_an_ear_split", "split_of"]

LEND_AN_EAR_HELD_OUT = ("valid", "test")
"""The Lend-an-Ear splits no model is trained on (both are data role ``selection``)."""


def split_of(dialogue_id: str, *, seed: int, valid_fraction: float, test_fraction: float) -> str:
    """A deterministic split for a dialogue (``train``, ``valid`` or ``test``), from a seeded hash of its id.

    Examples:
        >>> split_of("conv-1", seed=0, valid_fraction=0.1, test_fraction=0.1) in ("train", "valid", "test")
        True
    """
    digest = hashlib.sha256(f"{seed}:{dialogue_id}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < test_fraction:
        return "test"
    if u < test_fraction + valid_fraction:
        return "valid"
    return "train"


def lend_an_ear_split(conversation_id: str) -> str:
    """The split of a Lend-an-Ear conversation (about 80/10/10; 41/6/3 of the 50 conversations).

    Examples:
        >>> lend_an_ear_split("20241031145103738386") in ("train", "valid", "test")
        True
    """
    return split_of(conversation_id, seed=0, valid_fraction=0.1, test_fraction=0.1)


def lend_an_ear_role(conversation_id: str) -> str:
    """The data role of a Lend-an-Ear conversation: ``train``, or ``selection`` for the held-out ones.

    Its held-out conversations (splits ``valid`` and ``test``) gated many design choices, so both
    are ``selection``: fit on ``train`` only, choose on these, never quote them as test numbers.

    Examples:
        >>> {lend_an_ear_role(c) for c in "abcdefghijk"} <= {"train", "selection"}
        True
    """
    return "train" if lend_an_ear_split(conversation_id) == "train" else "selection"
