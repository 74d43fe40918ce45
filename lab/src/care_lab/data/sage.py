"""SAGE / RLVER loaders: simulator profiles and simulated support rollouts (the text is Chinese)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from care_lab.data._issues import IssueLog, Loaded
from care_lab.data._read import iter_jsonl
from care_sdk.types import Dialogue, Message

__all__ = ["SageProfile", "SageRollout", "load_sage_profiles", "load_sage_rollouts", "read_sage_rollouts"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SageProfile(_Frozen):
    """A simulated seeker: persona, backstory, hidden goal and opening line.

    Examples:
        >>> SageProfile(id="p", player="...", scene="...", main_cha="负面型", cha_group=("愤怒",),
        ...             task="...", first_talk="最近...").first_message().role
        'user'
    """

    id: str
    """Profile id."""
    player: str
    """The persona."""
    scene: str
    """The backstory and how the seeker reacts to replies."""
    main_cha: str
    """The character type (负面型 / 被动型 / 回避型)."""
    cha_group: tuple[str, ...]
    """Character traits."""
    task: str
    """The hidden support goal."""
    first_talk: str
    """The seeker's opening message."""

    def first_message(self) -> Message:
        """The opening line as a user message."""
        return Message(role="user", content=self.first_talk)


class SageRollout(_Frozen):
    """One simulated dialogue of a supporter model with a SAGE profile.

    ``emotion[i]`` is the simulator's emotion (0-100) after user message ``i`` (``None`` for
    assistant messages); ``deltas`` maps each assistant message index to the emotion change the
    simulator attributed to it (``planning.change`` on the next user message), a turn-level reward.

    Examples:
        >>> r = SageRollout(id="p", model="m", messages=[{"role": "user", "content": "a"},
        ...     {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
        ...     emotion=(40, None, 45), deltas={1: 5}, final_emotion=45, emo_state="Emotion-B",
        ...     topic="t", task="k", character="c")
        >>> r.to_dialogue().messages[1].content, r.deltas[1]
        ('b', 5)
    """

    id: str
    """The profile id."""
    model: str
    """The supporter model (from the file name)."""
    messages: tuple[Message, ...]
    """The dialogue (user = simulated seeker, assistant = supporter)."""
    emotion: tuple[int | None, ...]
    """Emotion after each user message; ``None`` for assistant messages."""
    deltas: dict[int, int]
    """Emotion change caused by each assistant message (by message index)."""
    final_emotion: int
    """The final emotion score (0-100)."""
    emo_state: str
    """The final emotion state label."""
    topic: str
    """The conversation topic."""
    task: str
    """The hidden support goal."""
    character: str
    """The character type."""
    withheld: tuple[int, ...] = ()
    """Message indices of test turns whose emotion change is withheld (read without a ledger entry)."""

    def to_dialogue(self) -> Dialogue:
        """The dialogue as :class:`~care_sdk.types.Dialogue`."""
        return Dialogue(id=f"{self.model}:{self.id}", messages=self.messages)


def load_sage_profiles(path: str | Path, *, strict: bool = False) -> Loaded[SageProfile]:
    """Load simulator profiles (``profiles/simulator_profile_withfirsttalk.jsonl``).

    Examples:
        >>> import os, pathlib
        >>> root = pathlib.Path(os.environ.get("CARE_DATA_DIR", "/no-data"))
        >>> p = root / "sage_rlver/profiles/simulator_profile_withfirsttalk.jsonl"
        >>> if p.exists():
        ...     assert len(load_sage_profiles(p)) == 100
    """
    path = Path(path)
    log = IssueLog(path, strict=strict)
    records = []
    for pos, obj in iter_jsonl(path, log):
        missing = [k for k in ("id", "player", "scene", "task", "first_talk") if not isinstance(obj.get(k), str)]
        if missing:
            log.add(pos, missing[0], "missing or not a string", dropped=True)
            continue
        groups = obj.get("cha_group") or []
        if not isinstance(groups, list):
            log.add(pos, "cha_group", "expected a list of strings")
            groups = []
        records.append(
            SageProfile(
                id=obj["id"],
                player=obj["player"],
                scene=obj["scene"],
                main_cha=str(obj.get("main_cha", "")),
                cha_group=tuple(str(g) for g in groups),
                task=obj["task"],
                first_talk=obj["first_talk"],
            )
        )
    return Loaded(records=records, issues=log.issues)


def _rollout(obj: dict[str, Any], pos: str, model: str, log: IssueLog) -> SageRollout | None:
    history = obj.get("history")
    if not isinstance(history, list) or not history:
        log.add(pos, "history", "missing or empty list of messages", dropped=True)
        return None
    messages: list[Message] = []
    emotion: list[int | None] = []
    deltas: dict[int, int] = {}
    for j, msg in enumerate(history):
        where = f"history[{j}]"
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            log.add(pos, f"{where}.role", "expected role user or assistant", dropped=True)
            return None
        content = msg.get("content")
        if not isinstance(content, str):
            log.add(pos, f"{where}.content", "missing text", dropped=True)
            return None
        if messages and messages[-1].role == msg["role"]:
            log.add(pos, f"{where}.role", "two messages in a row by the same role", dropped=True)
            return None
        messages.append(Message(role=msg["role"], content=content))
        if msg["role"] == "user":
            point = msg.get("emotion-point")
            if not isinstance(point, int):
                log.add(pos, f"{where}.emotion-point", f"expected an integer, got {point!r}")
                point = None
            emotion.append(point)
            change = (msg.get("planning") or {}).get("change") if isinstance(msg.get("planning"), dict) else None
            if j > 0:
                try:
                    deltas[j - 1] = int(change)  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    log.add(pos, f"{where}.planning.change", f"expected an integer, got {change!r}")
        else:
            emotion.append(None)
    final = obj.get("emo_point")
    if not isinstance(final, int):
        log.add(pos, "emo_point", f"expected an integer, got {final!r}", dropped=True)
        return None
    return SageRollout(
        id=str(obj.get("id", pos)),
        model=model,
        messages=tuple(messages),
        emotion=tuple(emotion),
        deltas=deltas,
        final_emotion=final,
        emo_state=str(obj.get("emo_state", "")),
        topic=str(obj.get("topic", "")),
        task=str(obj.get("task", "")),
        character=str(obj.get("character", "")),
    )


def read_sage_rollouts(path: str | Path, *, strict: bool = False) -> Loaded[SageRollout]:
    """Every rollout of a file with every emotion change, test turns' included: for
    :mod:`care_lab.data.sage_turns`, which gives each turn its role; read them with
    :func:`load_sage_rollouts`.

    Examples:
        >>> read_sage_rollouts("/nowhere/m_result.jsonl")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: /nowhere/m_result.jsonl: no such file
    """
    path = Path(path)
    log = IssueLog(path, strict=strict)
    model = path.name.removesuffix(".jsonl").removesuffix("_result")
    records = []
    for pos, obj in iter_jsonl(path, log):
        rollout = _rollout(obj, pos, model, log)
        if rollout is not None:
            records.append(rollout)
    return Loaded(records=records, issues=log.issues)


def load_sage_rollouts(
    path: str | Path, *, test_read: object | None = None, strict: bool = False
) -> Loaded[SageRollout]:
    """Load simulated rollouts of one supporter model (``results_*/<model>_result.jsonl``).

    The model name is the file name without ``_result.jsonl``. The turns outside the 400 the
    quality benchmark scored are a ``test`` set (:mod:`care_lab.data.sage_turns`): without
    ``test_read``, the ledger entry of a read of them, their emotion changes (the labels) are
    withheld (left out of ``deltas``, their indices in ``withheld``). Their replies stay in the
    messages, since later turns' contexts hold them; a test turn as an item (reply and label)
    comes only from :func:`care_lab.data.sage_turns.sage_test_turns`.

    Raises:
        InputError: the file is missing, or ``test_read`` is not a recorded read of the SAGE test turns.

    Examples:
        >>> import os, pathlib
        >>> root = pathlib.Path(os.environ.get("CARE_DATA_DIR", "/no-data"))
        >>> p = root / "sage_rlver/results_deepseek-v3-simulator/gpt-4.1_result.jsonl"
        >>> if p.exists():
        ...     rollouts = load_sage_rollouts(p)
        ...     assert rollouts[0].model == "gpt-4.1" and not set(rollouts[0].deltas) & set(rollouts[0].withheld)
    """
    from care_lab.data.results import check_test_read
    from care_lab.data.sage_turns import LEDGER_NAME, rollout_test_turns

    loaded = read_sage_rollouts(path, strict=strict)
    if test_read is not None:
        check_test_read(test_read, LEDGER_NAME, path)
        return loaded
    hidden = rollout_test_turns(path)
    records = []
    for rollout in loaded:
        test = set(rollout.deltas) if hidden is None else set(hidden.get(rollout.id, ()))
        if test & set(rollout.deltas):
            kept = {i: d for i, d in rollout.deltas.items() if i not in test}
            rollout = rollout.model_copy(update={"deltas": kept, "withheld": tuple(sorted(test & set(rollout.deltas)))})
        records.append(rollout)
    return Loaded(records=records, issues=loaded.issues)
