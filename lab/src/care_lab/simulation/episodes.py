"""Episodes: a policy talks with a simulated user, turn by turn, until the user ends or turns run out.

The loop is shared by training (the policy is the model being trained, see
:class:`~care_lab.training.policy.tokens.TokenPolicy`) and evaluation (the policy is any backend,
see :class:`BackendPolicy`). Each episode records how it ended:

- ``user_ended``: the simulated user set ``end``;
- ``max_turns``: the policy wrote its last allowed turn;
- ``simulator_error``: the simulated user's reply failed (garbage after retries, a timeout); the
  episode keeps the turns before the failure and ``error`` says what happened;
- ``policy_error``: the policy backend failed (evaluation only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from care_lab.simulation.profiles import UserProfile
from care_lab.simulation.simulated_user import SimulatedUser
from care_sdk.backends import Backend, GenerationRequest, resolve_backend
from care_sdk.errors import CareError
from care_sdk.types import Dialogue, Message

__all__ = ["DEFAULT_SYSTEM_PROMPT", "BackendPolicy", "EndReason", "Episode", "TurnPolicy", "run_episodes"]

DEFAULT_SYSTEM_PROMPT = (
    "You are a warm, thoughtful emotional supporter. Understand what the person is going through, "
    "acknowledge their feelings without clichés, and help them find their own way forward. "
    "Reply in a few sentences, in the language the person uses."
)
"""The supporter policy's system prompt unless a config or command sets one (policy training and
``care eval sim-user`` alike)."""

EndReason = Literal["user_ended", "max_turns", "simulator_error", "policy_error"]


class Episode(BaseModel):
    """One rolled-out conversation between the policy and a simulated user.

    ``messages`` is the dialogue without the policy's system prompt (what CARE judges);
    ``emotions[i]`` is the simulator's emotion after user message ``i`` (``None`` for the opening).

    Examples:
        >>> e = Episode(id="e1", profile_id="p", messages=[{"role": "user", "content": "hi"},
        ...             {"role": "assistant", "content": "Hello. What's on your mind?"}], end_reason="max_turns")
        >>> e.policy_turns, e.to_dialogue().id
        (1, 'e1')
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """Episode id (unique within a run)."""
    profile_id: str
    """The simulated user's profile."""
    messages: tuple[Message, ...]
    """The dialogue, starting with the user's opening."""
    emotions: tuple[int | None, ...] = ()
    """The simulator's emotion after each user message (``None`` for the opening)."""
    end_reason: EndReason
    """Why the episode ended."""
    error: str | None = None
    """The failure that ended it, for ``simulator_error`` / ``policy_error``."""

    @property
    def policy_turns(self) -> int:
        """How many replies the policy wrote."""
        return sum(1 for m in self.messages if m.role == "assistant")

    def to_dialogue(self) -> Dialogue:
        """The episode as a :class:`~care_sdk.types.Dialogue` (what ``care score`` reads)."""
        return Dialogue(id=self.id, messages=self.messages)


class TurnPolicy(Protocol):
    """What the episode loop needs from a policy.

    ``respond`` gets the positions of the episodes that still run and their conversations (the
    policy's system prompt first); it returns one reply text, or the error, per episode. A policy
    whose ``collective`` is true is called every round, even with no episode left (distributed
    generation needs every process to take part in every call).
    """

    collective: bool

    def respond(self, indices: Sequence[int], conversations: Sequence[Sequence[Message]]) -> list[str | CareError]:
        """One reply per running episode."""
        ...


class BackendPolicy:
    """A policy served by any backend (a trained checkpoint via ``hf:``, a vLLM server via ``openai:``).

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> policy = BackendPolicy(ScriptedBackend(["I hear you."]))
        >>> policy.respond([0], [[Message(role="user", content="I'm sad.")]])
        ['I hear you.']
    """

    collective = False

    def __init__(
        self, backend: str | Backend | Any, *, max_tokens: int = 128, temperature: float = 0.7, seed: int | None = 0
    ) -> None:
        self.backend = resolve_backend(backend)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed

    def respond(self, indices: Sequence[int], conversations: Sequence[Sequence[Message]]) -> list[str | CareError]:
        """One reply per conversation; a failed request is its :class:`~care_sdk.errors.BackendError`."""
        requests = [
            GenerationRequest(
                messages=tuple(c),
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                seed=None if self.seed is None else self.seed + i,
            )
            for i, c in zip(indices, conversations, strict=True)
        ]
        results = self.backend.generate(requests) if requests else []
        return [r.error if r.error is not None else r.completions[0].text.strip() for r in results]

    def __repr__(self) -> str:
        return f"BackendPolicy({self.backend!r})"


def run_episodes(
    profiles: Sequence[UserProfile],
    policy: TurnPolicy,
    simulator: SimulatedUser,
    *,
    max_turns: int,
    system_prompt: str | None = None,
    ids: Sequence[str] | None = None,
) -> list[Episode]:
    """Roll out one episode per profile, all episodes advancing together turn by turn.

    Each round the policy answers every running episode, then the simulated user answers each
    (one backend batch); a user that ends the conversation, a failed user turn or the last allowed
    policy turn ends that episode while the others go on.

    Args:
        profiles: one simulated user per episode (repeat a profile for a GRPO group).
        policy: writes the supporter turns.
        simulator: writes the user turns.
        max_turns: policy turns per episode at most.
        system_prompt: the policy's system prompt (not part of the recorded dialogue).
        ids: episode ids (default ``"<profile id>-<position>"``).

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> sim = SimulatedUser(ScriptedBackend(['{"reply": "Thanks.", "end": true, "emotion": 80}']))
        >>> p = UserProfile(id="p", source="d", persona="", situation="", goal="", opening="I'm lonely.")
        >>> [e] = run_episodes([p], BackendPolicy(ScriptedBackend(["Tell me more."])), sim, max_turns=3)
        >>> [m.role for m in e.messages], e.end_reason, e.emotions
        (['user', 'assistant', 'user'], 'user_ended', (None, 80))
    """
    if max_turns < 1:
        raise ValueError("max_turns must be at least 1")
    if ids is not None and len(ids) != len(profiles):
        raise ValueError(f"{len(ids)} ids for {len(profiles)} profiles")
    episode_ids = list(ids) if ids is not None else [f"{p.id}-{i}" for i, p in enumerate(profiles)]
    dialogues: list[list[Message]] = [[p.first_message()] for p in profiles]
    emotions: list[list[int | None]] = [[None] for _ in profiles]
    ended: dict[int, tuple[EndReason, str | None]] = {}
    head = [Message(role="system", content=system_prompt)] if system_prompt else []
    for turn in range(max_turns):
        active = [i for i in range(len(profiles)) if i not in ended]
        if not active and not policy.collective:
            break
        replies = policy.respond(active, [head + dialogues[i] for i in active])
        if len(replies) != len(active):
            raise RuntimeError(f"policy returned {len(replies)} replies for {len(active)} episodes")
        speaking = []
        for i, reply in zip(active, replies, strict=True):
            if isinstance(reply, CareError):
                ended[i] = ("policy_error", f"{type(reply).__name__}: {reply}")
                continue
            dialogues[i].append(Message(role="assistant", content=reply))
            if turn == max_turns - 1:
                ended[i] = ("max_turns", None)
            else:
                speaking.append(i)
        answers = simulator.respond_batch([(profiles[i], dialogues[i]) for i in speaking])
        for i, answer in zip(speaking, answers, strict=True):
            if isinstance(answer, CareError):
                ended[i] = ("simulator_error", f"{type(answer).__name__}: {answer}")
                continue
            dialogues[i].append(Message(role="user", content=answer.reply))
            emotions[i].append(answer.emotion)
            if answer.end:
                ended[i] = ("user_ended", None)
    return [
        Episode(
            id=episode_ids[i],
            profile_id=profiles[i].id,
            messages=tuple(dialogues[i]),
            emotions=tuple(emotions[i]),
            end_reason=ended[i][0],
            error=ended[i][1],
        )
        for i in range(len(profiles))
    ]
