"""Typed records shared by the corpus loaders: support dialogues and their supporter turns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from care_lab.data.strategies import StrategyMap, default_strategy_map
from care_sdk.types import Dialogue, Dimension, Message

__all__ = ["SupportDialogue", "SupportTurn"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SupportTurn(_Frozen):
    """One supporter turn: the context before it, the reference reply and its strategies.

    Examples:
        >>> d = SupportDialogue(id="d1", source="demo", messages=[
        ...     {"role": "user", "content": "I failed my exam."},
        ...     {"role": "assistant", "content": "That sounds hard. What happened?"},
        ... ], strategies=[None, ("Reflection of feelings", "Question")])
        >>> t = d.supporter_turns()[0]
        >>> t.reply, t.counts[Dimension.AFFECTIVE], [d.value for d in t.top_dimensions]
        ('That sounds hard. What happened?', 1, ['cognitive', 'affective'])
    """

    dialogue_id: str
    """The dialogue's id."""
    source: str
    """The corpus it came from, e.g. ``esconv``."""
    index: int
    """Position of the reply in the dialogue's messages."""
    context: tuple[Message, ...]
    """Every message before the reply (user = seeker, assistant = supporter)."""
    reply: str
    """The reference supporter reply."""
    strategies: tuple[str, ...] | None
    """Strategy labels of the reply (canonical names where known); ``None`` when unlabelled."""
    counts: dict[Dimension, int]
    """Per-dimension strategy counts n_d of the reply (all zero when unlabelled)."""

    @property
    def labelled(self) -> bool:
        """Whether the reply carries strategy labels."""
        return self.strategies is not None

    @property
    def top_dimensions(self) -> tuple[Dimension, ...]:
        """The dimensions with the largest count (empty when every count is 0)."""
        best = max(self.counts.values(), default=0)
        if best == 0:
            return ()
        return tuple(d for d, n in self.counts.items() if n == best)

    def context_messages(self) -> list[dict[str, str]]:
        """The context as OpenAI chat message dicts."""
        return [m.model_dump() for m in self.context]


class SupportDialogue(_Frozen):
    """A support dialogue with per-message strategy labels and corpus metadata.

    ``messages`` are OpenAI chat messages (user = seeker, assistant = supporter) with consecutive
    utterances of one speaker merged; ``strategies[i]`` holds the labels of message ``i`` (all
    labels of the merged utterances, in order), ``None`` when the message is unlabelled.

    Examples:
        >>> d = SupportDialogue(id="x", source="demo", messages=[{"role": "user", "content": "hi"}])
        >>> d.to_dialogue().messages[0].role
        'user'
    """

    id: str
    """Dialogue id (corpus id, or ``<split>-<position>`` where the corpus has none)."""
    source: str
    """The corpus, e.g. ``esconv``, ``esconv-failed``, ``mint``, ``lend-an-ear``."""
    messages: tuple[Message, ...]
    """The dialogue's messages in order."""
    strategies: tuple[tuple[str, ...] | None, ...] = ()
    """Per-message strategy labels (empty tuple: no message is labelled)."""
    metadata: dict[str, Any] = {}
    """Corpus metadata (see each loader for its keys)."""

    @model_validator(mode="after")
    def _align(self) -> SupportDialogue:
        if not self.strategies:
            object.__setattr__(self, "strategies", (None,) * len(self.messages))
        elif len(self.strategies) != len(self.messages):
            raise ValueError(f"{len(self.strategies)} strategy entries for {len(self.messages)} messages")
        return self

    def to_dialogue(self) -> Dialogue:
        """The dialogue as :class:`~care_sdk.types.Dialogue` (OpenAI messages)."""
        return Dialogue(id=self.id, messages=self.messages)

    def supporter_turns(self, strategy_map: StrategyMap | None = None) -> list[SupportTurn]:
        """Every supporter (assistant) turn that has at least one message before it.

        Args:
            strategy_map: maps strategies to dimensions for ``counts``; the default map if omitted.
        """
        mapping = strategy_map or default_strategy_map()
        turns = []
        for i, message in enumerate(self.messages):
            if message.role != "assistant" or i == 0:
                continue
            labels = self.strategies[i]
            turns.append(
                SupportTurn(
                    dialogue_id=self.id,
                    source=self.source,
                    index=i,
                    context=self.messages[:i],
                    reply=message.content,
                    strategies=labels,
                    counts=mapping.counts(labels or ()),
                )
            )
        return turns
