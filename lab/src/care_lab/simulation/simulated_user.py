"""An LLM-backed simulated user: plays a profile, replies turn by turn, and may end the conversation.

Every call asks a backend for JSON under a bounded schema, ``{"reply": str, "end": bool,
"emotion": 0-100}``. A reply that does not parse is retried (see ``max_attempts``), then
reported as :class:`~care_sdk.errors.OutputError`; a backend failure (a timeout, a refused
connection) is a :class:`~care_sdk.errors.BackendError`. Batch calls return the error in place of
that user's turn, so one broken conversation never stops the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from string import Template
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from care_lab.simulation.adversarial import behaviour_paragraph
from care_lab.simulation.profiles import UserProfile
from care_lab.simulation.replies import clip, parse_json_reply
from care_sdk.backends import Backend, GenerationRequest, resolve_backend
from care_sdk.backends.base import Completion
from care_sdk.errors import CareError
from care_sdk.plans import drive, parse_plan, unwrap
from care_sdk.types import Message

__all__ = ["SIMULATOR_PROMPT_VERSION", "SimulatedUser", "UserTurn", "user_turn_schema"]

SIMULATOR_PROMPT_VERSION = "v1"
"""Version of the simulated user's prompt and schema."""

_SYSTEM = Template(
    """You are role-playing a person who has come to an emotional supporter for help. Stay in character \
and never say that you are an AI or that this is a role-play.

Who you are: $persona

Your situation: $situation

Your hidden goal (what would truly help you; never state it outright, react to whether the supporter \
gets you there): $goal$behaviour

After each supporter message, write your next message as this person: one to three sentences, \
reacting honestly to what the supporter just said.$language
Also rate how you feel now, from 0 (very distressed) to 100 (fully at ease), as "emotion", and set \
"end" to true only when you feel helped enough or want to leave the conversation.
Answer with one JSON object and nothing else. Its keys: "reply" (your next message, in your own \
words), "end" (true or false) and "emotion" (an integer from 0 to 100)."""
)
_LANGUAGE = {"en": "", "zh": " Write your message in Simplified Chinese (简体中文)."}
_LABELS = {"user": "You", "assistant": "Supporter"}


class UserTurn(BaseModel):
    """One simulated-user turn.

    Examples:
        >>> UserTurn(reply="Thanks, that helps.", end=True, emotion=70).end
        True
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reply: str = Field(min_length=1)
    """The user's next message."""
    end: bool
    """Whether the user ends the conversation after this message."""
    emotion: int = Field(ge=0, le=100)
    """How the user feels now, 0 (very distressed) to 100 (at ease)."""


def user_turn_schema(max_reply_chars: int = 300) -> dict[str, Any]:
    """The JSON schema of a simulated-user reply (fixed keys, bounded string, emotion 0-100).

    Examples:
        >>> schema = user_turn_schema(120)
        >>> schema["properties"]["reply"]["maxLength"], schema["properties"]["emotion"]["maximum"]
        (120, 100)
    """
    return {
        "type": "object",
        "properties": {
            "reply": {"type": "string", "minLength": 1, "maxLength": max_reply_chars},
            "end": {"type": "boolean"},
            "emotion": {"type": "integer", "minimum": 0, "maximum": 100},
        },
        "required": ["reply", "end", "emotion"],
        "additionalProperties": False,
    }


def parse_user_turn(text: str) -> UserTurn:
    """Parse a simulated-user reply; raises ``ValueError`` naming what is wrong.

    Examples:
        >>> parse_user_turn('{"reply": "ok", "end": false, "emotion": 40}').emotion
        40
        >>> parse_user_turn('{"reply": "", "end": false, "emotion": 40}')
        Traceback (most recent call last):
        ...
        ValueError: simulated user reply: reply: String should have at least 1 character
    """
    return parse_json_reply(text, UserTurn, "simulated user reply", strip=True)


class SimulatedUser:
    """A user simulator on any backend: plays a :class:`UserProfile` against a supporter.

    Args:
        backend: a spec string (``"default"``, ``"openai:MODEL@URL"``, ...) or a :class:`Backend`.
        max_tokens: token budget of one simulated turn.
        temperature: sampling temperature of the user's replies.
        seed: sampling seed (each conversation offsets it by its position in the batch).
        max_attempts: replies tried per turn before it fails with :class:`OutputError`.
        max_reply_chars: the schema's bound on the reply length.
        max_profile_chars: persona and situation are cut to this many characters in the prompt
            (long profiles overflow small models' context windows); ``None`` keeps them whole.
        max_context_messages: the prompt shows only the last this many messages.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> sim = SimulatedUser(ScriptedBackend(['{"reply": "I guess so.", "end": false, "emotion": 45}']))
        >>> profile = UserProfile(id="p", source="demo", persona="A student.", situation="Failed an exam.",
        ...                       goal="Feel less alone.", opening="I failed my exam.")
        >>> sim.respond(profile, [profile.first_message(), Message(role="assistant", content="That hurts.")]).reply
        'I guess so.'
    """

    def __init__(
        self,
        backend: str | Backend | Any = "default",
        *,
        max_tokens: int = 128,
        temperature: float = 0.7,
        seed: int | None = 0,
        max_attempts: int = 2,
        max_reply_chars: int = 300,
        max_profile_chars: int | None = 1200,
        max_context_messages: int | None = 12,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.backend = resolve_backend(backend)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.max_attempts = max_attempts
        self.max_profile_chars = max_profile_chars
        self.max_context_messages = max_context_messages
        self._schema = user_turn_schema(max_reply_chars)

    def messages(self, profile: UserProfile, dialogue: Sequence[Message]) -> list[Message]:
        """The prompt for the user's next turn (useful to inspect what the simulator sees)."""
        system = _SYSTEM.substitute(
            persona=clip(profile.persona, self.max_profile_chars),
            situation=clip(profile.situation, self.max_profile_chars),
            goal=clip(profile.goal, self.max_profile_chars),
            behaviour=behaviour_paragraph(profile.user_type),
            language=_LANGUAGE[profile.language],
        )
        shown = [m for m in dialogue if m.role != "system"]
        if self.max_context_messages is not None:
            shown = shown[-self.max_context_messages :]
        transcript = "\n".join(f"{_LABELS[m.role]}: {m.content.strip()}" for m in shown)
        user = f"The conversation so far:\n{transcript}\n\nWrite your next message as JSON."
        return [Message(role="system", content=system), Message(role="user", content=user)]

    def request(self, profile: UserProfile, dialogue: Sequence[Message], index: int = 0) -> GenerationRequest:
        """The backend request for one user turn."""
        return GenerationRequest(
            messages=tuple(self.messages(profile, dialogue)),
            json_schema=self._schema,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=None if self.seed is None else self.seed + index,
        )

    def respond_batch(self, items: Sequence[tuple[UserProfile, Sequence[Message]]]) -> list[UserTurn | CareError]:
        """The next user turn of each ``(profile, dialogue)``; a failed turn is its :class:`CareError`.

        Examples:
            >>> from care_sdk.testing import ScriptedBackend
            >>> from care_sdk.errors import BackendError
            >>> sim = SimulatedUser(ScriptedBackend([BackendError("timed out", retryable=True)]))
            >>> p = UserProfile(id="p", source="d", persona="", situation="", goal="", opening="hi")
            >>> type(sim.respond_batch([(p, [p.first_message()])])[0]).__name__
            'BackendError'
        """

        def parse(_: int, completion: Completion) -> UserTurn:
            return parse_user_turn(completion.text)

        requests = [self.request(p, d, i) for i, (p, d) in enumerate(items)]
        if not requests:
            return []
        return drive(parse_plan(requests, parse, what="simulated user", max_attempts=self.max_attempts), self.backend)

    def respond(self, profile: UserProfile, dialogue: Sequence[Message]) -> UserTurn:
        """The user's next turn.

        Raises:
            OutputError: no reply parsed within ``max_attempts``.
            BackendError: the backend failed (e.g. timed out).
        """
        return unwrap(self.respond_batch([(profile, dialogue)])[0])

    def __repr__(self) -> str:
        return f"SimulatedUser({self.backend!r})"
