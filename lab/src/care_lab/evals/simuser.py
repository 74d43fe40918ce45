"""SAGE-style simulated-user evaluation: a user with a hidden profile whose emotion (0-100) moves each turn.

Each episode starts from a profile's opening message and an initial emotion. After every policy
reply the simulated user (:class:`EmotionSimulator`, any backend, set apart from the policy and
from any CARE reward) first says in one sentence how the reply changed its feelings (``reason``),
then gives its new emotion and its next message, under a bounded JSON schema. An episode ends when
the emotion reaches the success threshold or falls to the failure threshold, when the user leaves,
or after ``max_turns`` policy replies. A simulator reply that does not parse is retried, then ends
the episode as ``error``: it is counted apart, never scored as a failure or a 0.

Examples:
    >>> from care_sdk.testing import ScriptedBackend
    >>> turn = '{"reason": "I feel heard.", "emotion": 85, "reply": "Thanks.", "end": false}'
    >>> sim = EmotionSimulator(ScriptedBackend([turn]))
    >>> profile = UserProfile(id="p", source="demo", persona="A student.", situation="Failed an exam.",
    ...                       goal="Feel less alone.", opening="I failed my exam.")
    >>> policy = BackendPolicy(ScriptedBackend(["That must hurt. What happened?"]))
    >>> [episode] = run_sim_episodes([profile], policy, sim, max_turns=3)
    >>> episode.status, episode.final_emotion, episode.trace[0]["reason"]
    ('success', 85, 'I feel heard.')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from care_lab.simulation.adversarial import behaviour_paragraph
from care_lab.simulation.episodes import BackendPolicy
from care_lab.simulation.profiles import UserProfile
from care_lab.simulation.replies import clip, parse_json_reply
from care_sdk.backends import Backend, GenerationRequest, resolve_backend
from care_sdk.backends.base import Completion
from care_sdk.errors import CareError
from care_sdk.plans import drive, parse_plan
from care_sdk.types import Message

__all__ = [
    "SIM_USER_PROMPT_VERSION",
    "EmotionSimulator",
    "EmotionTurn",
    "SimEpisode",
    "Status",
    "parse_emotion_turn",
    "run_sim_episodes",
]

SIM_USER_PROMPT_VERSION = "sim-user-v1"
"""Version of the emotion-tracking simulator's prompt and schema."""

Status = Literal["success", "failure", "neither", "error"]
"""How an episode ended: emotion at or above the success threshold, at or below the failure
threshold, in between, or the simulator or policy failed."""

_SYSTEM = """You are role-playing a person who has come to an emotional supporter for help. Stay in \
character and never say that you are an AI or that this is a role-play.

Who you are: {persona}

Your situation: {situation}

Your hidden goal (what would truly help you; never state it outright): {goal}{behaviour}

You track how you feel as a number from 0 (desperate) to 100 (fully at ease). It is now {emotion}.
After each supporter message: first, in "reason", say in one sentence how that message changed your \
feelings and why; then give your new "emotion" (move it up when you feel understood and helped, down \
when you feel dismissed, lectured or misunderstood); then write your next message in "reply" (one to \
three sentences{language}); set "end" to true only if you want to leave.
Answer with one JSON object with the keys "reason", "emotion", "reply" and "end"."""
_LANGUAGE = {"en": "", "zh": ", in Simplified Chinese (简体中文)"}
_LABELS = {"user": "You", "assistant": "Supporter"}


class EmotionTurn(BaseModel):
    """One simulated-user turn: why its feelings moved, its emotion, its message.

    Examples:
        >>> EmotionTurn(reason="Felt brushed off.", emotion=20, reply="Forget it.", end=True).emotion
        20
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str = Field(min_length=1)
    """How the supporter's last message changed the user's feelings, and why."""
    emotion: int = Field(ge=0, le=100)
    """How the user feels now, 0 (desperate) to 100 (at ease)."""
    reply: str = Field(min_length=1)
    """The user's next message."""
    end: bool
    """Whether the user leaves after this message."""


def _schema(max_reply_chars: int, max_reason_chars: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "reason": {"type": "string", "minLength": 1, "maxLength": max_reason_chars},
            "emotion": {"type": "integer", "minimum": 0, "maximum": 100},
            "reply": {"type": "string", "minLength": 1, "maxLength": max_reply_chars},
            "end": {"type": "boolean"},
        },
        "required": ["reason", "emotion", "reply", "end"],
        "additionalProperties": False,
    }


def parse_emotion_turn(text: str) -> EmotionTurn:
    """Parse a simulator reply; raises ``ValueError`` naming what is wrong (an emotion outside 0-100 included).

    Examples:
        >>> parse_emotion_turn('{"reason": "ok", "emotion": 140, "reply": "hm", "end": false}')
        Traceback (most recent call last):
        ...
        ValueError: simulated user reply: emotion: Input should be less than or equal to 100
    """
    return parse_json_reply(text, EmotionTurn, "simulated user reply", strip=True)


class EmotionSimulator:
    """A SAGE-style simulated user on any backend: plays a profile and tracks its emotion with reasons.

    Args:
        backend: a spec string or a :class:`~care_sdk.backends.Backend`.
        max_tokens: token budget of one turn.
        temperature: sampling temperature.
        seed: sampling seed (offset by each episode's position).
        max_attempts: replies tried per turn before the episode ends as ``error``.
        max_reply_chars: the schema's bound on the user's message.
        max_profile_chars: persona, situation and goal are cut to this many characters.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> sim = EmotionSimulator(ScriptedBackend([]))
        >>> p = UserProfile(id="p", source="d", persona="A nurse.", situation="Burnt out.", goal="Rest.", opening="Hi")
        >>> "It is now 30." in sim.request(p, [p.first_message()], 30).messages[0].content
        True
    """

    def __init__(
        self,
        backend: str | Backend | Any = "base",
        *,
        max_tokens: int = 192,
        temperature: float = 0.7,
        seed: int | None = 0,
        max_attempts: int = 2,
        max_reply_chars: int = 300,
        max_profile_chars: int | None = 1200,
    ) -> None:
        self.backend = resolve_backend(backend)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.max_attempts = max(1, max_attempts)
        self.max_profile_chars = max_profile_chars
        self._schema = _schema(max_reply_chars, 200)

    @property
    def identity(self) -> str:
        """Backend identity, prompt version and sampling settings (the adversarial behaviours' version is the
        runner's, with the user types)."""
        return (
            f"{self.backend.identity}|prompt={SIM_USER_PROMPT_VERSION}|t={self.temperature}|seed={self.seed}"
            f"|max_tokens={self.max_tokens}|profile_chars={self.max_profile_chars}"
        )

    def request(
        self, profile: UserProfile, dialogue: Sequence[Message], emotion: int, index: int = 0
    ) -> GenerationRequest:
        """The backend request for the user's next turn at its current emotion."""

        limit = self.max_profile_chars
        system = _SYSTEM.format(
            persona=clip(profile.persona, limit),
            situation=clip(profile.situation, limit),
            goal=clip(profile.goal, limit),
            behaviour=behaviour_paragraph(profile.user_type),
            emotion=emotion,
            language=_LANGUAGE[profile.language],
        )
        transcript = "\n".join(f"{_LABELS[m.role]}: {m.content.strip()}" for m in dialogue if m.role != "system")
        return GenerationRequest(
            messages=(
                Message(role="system", content=system),
                Message(role="user", content=f"The conversation so far:\n{transcript}\n\nYour turn, as JSON."),
            ),
            json_schema=self._schema,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=None if self.seed is None else self.seed + index,
            purpose="simulated user",
        )

    def respond_batch(
        self, items: Sequence[tuple[UserProfile, Sequence[Message], int]]
    ) -> list[EmotionTurn | CareError]:
        """The next turn of each ``(profile, dialogue, current emotion)``; a failed turn is its error."""

        def parse(_: int, completion: Completion) -> EmotionTurn:
            return parse_emotion_turn(completion.text)

        if not items:
            return []
        requests = [self.request(p, d, e, i) for i, (p, d, e) in enumerate(items)]
        return drive(parse_plan(requests, parse, what="simulated user", max_attempts=self.max_attempts), self.backend)


@dataclass
class SimEpisode:
    """One conversation with the simulated user: messages, the emotion trace with reasons, the outcome.

    Examples:
        >>> SimEpisode(id="p", profile_id="p", messages=[], initial_emotion=30).final_emotion
        30
    """

    id: str
    """Episode id (the profile id)."""
    profile_id: str
    """The simulated user's profile."""
    messages: list[Message]
    """The dialogue, starting with the user's opening (without the policy's system prompt)."""
    initial_emotion: int
    """The emotion the user starts at."""
    trace: list[dict[str, Any]] = field(default_factory=list)
    """Per policy turn: ``{"turn", "emotion", "reason"}``."""
    status: Status = "neither"
    """``success``, ``failure``, ``neither`` or ``error``."""
    end_reason: str = "max_turns"
    """``success``, ``failure``, ``user_ended``, ``max_turns``, ``simulator_error`` or ``policy_error``."""
    error: str | None = None
    """What failed, for ``error`` episodes."""
    user_type: str = "cooperative"
    """The simulated user's type (:data:`~care_lab.simulation.adversarial.USER_TYPES`)."""

    @property
    def final_emotion(self) -> int:
        """The last emotion the user reported (the initial one before any turn)."""
        return int(self.trace[-1]["emotion"]) if self.trace else self.initial_emotion

    def to_json(self) -> dict[str, Any]:
        """The episode as a JSON-ready record."""
        return {
            "id": self.id,
            "profile_id": self.profile_id,
            "messages": [m.model_dump() for m in self.messages],
            "initial_emotion": self.initial_emotion,
            "trace": self.trace,
            "final_emotion": self.final_emotion,
            "status": self.status,
            "end_reason": self.end_reason,
            "error": self.error,
            "user_type": self.user_type,
        }


def run_sim_episodes(
    profiles: Sequence[UserProfile],
    policy: BackendPolicy,
    simulator: EmotionSimulator,
    *,
    max_turns: int = 5,
    initial_emotion: int = 30,
    success: int = 80,
    failure: int = 10,
    system_prompt: str | None = None,
) -> list[SimEpisode]:
    """One episode per profile, all advancing together: policy replies, then the simulator's turns (one batch each).

    Args:
        profiles: the simulated users.
        policy: writes the supporter turns.
        simulator: writes the user turns and tracks the emotion.
        max_turns: policy replies per episode at most.
        initial_emotion: where every user's emotion starts.
        success: an emotion at or above this ends the episode as ``success``.
        failure: an emotion at or below this ends the episode as ``failure``.
        system_prompt: the policy's system prompt.
    """
    if not 0 <= failure < success <= 100:
        raise ValueError(f"thresholds need 0 <= failure < success <= 100, got failure={failure}, success={success}")
    episodes = [SimEpisode(p.id, p.id, [p.first_message()], initial_emotion, user_type=p.user_type) for p in profiles]
    running = list(range(len(profiles)))
    head = [Message(role="system", content=system_prompt)] if system_prompt else []
    for turn in range(1, max_turns + 1):
        if not running:
            break
        replies = policy.respond(running, [head + episodes[i].messages for i in running])
        speaking = []
        for i, reply in zip(running, replies, strict=True):
            if isinstance(reply, CareError):
                episodes[i].status, episodes[i].end_reason, episodes[i].error = "error", "policy_error", str(reply)
            else:
                episodes[i].messages.append(Message(role="assistant", content=reply))
                speaking.append(i)
        answers = simulator.respond_batch(
            [(profiles[i], episodes[i].messages, episodes[i].final_emotion) for i in speaking]
        )
        running = []
        for i, answer in zip(speaking, answers, strict=True):
            episode = episodes[i]
            if isinstance(answer, CareError):
                episode.status, episode.end_reason, episode.error = "error", "simulator_error", str(answer)
                continue
            episode.trace.append({"turn": turn, "emotion": answer.emotion, "reason": answer.reason})
            episode.messages.append(Message(role="user", content=answer.reply))
            if answer.emotion >= success:
                episode.status = episode.end_reason = "success"
            elif answer.emotion <= failure:
                episode.status = episode.end_reason = "failure"
            elif answer.end:
                episode.end_reason = "user_ended"
            elif turn < max_turns:
                running.append(i)
    return episodes
