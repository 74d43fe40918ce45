"""ESConv loader: the JSONL re-release and the original ``ESConv.json`` / ``FailedESConv.json`` layout.

Both layouts become :class:`~care_lab.data.SupportDialogue` records (user = seeker,
assistant = supporter) with consecutive utterances of one speaker merged into one message and
every strategy of the merged supporter utterances kept, in order, under canonical names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from care_lab.data._issues import IssueLog, Loaded, merge
from care_lab.data._read import iter_json_list, iter_jsonl
from care_lab.data.records import SupportDialogue
from care_lab.data.strategies import StrategyMap, default_strategy_map
from care_sdk.errors import InputError
from care_sdk.types import Message, Role

__all__ = ["ESCONV_SPLITS", "load_esconv"]

ESCONV_SPLITS = ("train", "valid", "test")
"""The splits of the JSONL re-release, in order."""

_ROLES: dict[str, Role] = {
    "usr": "user",
    "seeker": "user",
    "speaker": "user",  # original layout: the seeker is the "speaker", the supporter the "listener"
    "sys": "assistant",
    "supporter": "assistant",
    "listener": "assistant",
}
_SURVEY = {
    "seeker": ("initial_emotion_intensity", "empathy", "relevance", "final_emotion_intensity"),
    "supporter": ("relevance",),
}
_TEXT_META = (
    "experience_type",
    "emotion_type",
    "problem_type",
    "situation",
    "seeker_question1",
    "seeker_question2",
    "supporter_question1",
    "supporter_question2",
)


def load_esconv(
    path: str | Path,
    *,
    splits: tuple[str, ...] | None = None,
    strategy_map: StrategyMap | None = None,
    strict: bool = False,
) -> Loaded[SupportDialogue]:
    """Load ESConv dialogues from a file or a directory.

    A ``.jsonl`` file is read as the re-release (``speaker`` usr/sys, ``text``, ``strategy``);
    a ``.json`` file as the original layout (``speaker`` seeker|speaker / supporter|listener,
    ``content``, ``annotation.strategy`` and ``annotation.feedback``). A directory loads
    ``<split>.jsonl`` for each split (default: all three), or ``ESConv.json`` when there are no
    JSONL splits.

    Metadata keys: ``split``, ``experience_type``, ``emotion_type``, ``problem_type``,
    ``situation``, the survey scores as ints or ``None`` (``seeker_initial_emotion_intensity``,
    ``seeker_empathy``, ``seeker_relevance``, ``seeker_final_emotion_intensity``,
    ``supporter_relevance``), the free-text ``seeker_question1/2`` and ``supporter_question1/2``,
    and for the original layout ``feedback``: ``[[message_index, score], ...]`` from seeker turns.

    Args:
        path: a ``.jsonl`` or ``.json`` file, or a directory holding the splits.
        splits: which splits to read from a directory.
        strategy_map: names the known strategies and their aliases (default map if omitted).
        strict: raise :class:`~care_sdk.errors.InputError` at the first issue instead of collecting it.

    Returns:
        The dialogues and every issue found (file, position, field).

    Raises:
        InputError: the path does not exist or is not a dialogue file; any issue in strict mode.

    Examples:
        >>> import tempfile, pathlib, json
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "test.jsonl"
        >>> _ = p.write_text(json.dumps({"dialog": [
        ...     {"speaker": "usr", "text": "I lost my job."},
        ...     {"speaker": "sys", "text": "I'm sorry.", "strategy": "Reflection of feelings"},
        ...     {"speaker": "sys", "text": "What happened?", "strategy": "Question"}]}) + "\\n")
        >>> d = load_esconv(p)[0]
        >>> d.messages[1].content, d.strategies[1]
        ("I'm sorry.\\nWhat happened?", ('Reflection of feelings', 'Question'))
    """
    path = Path(path)
    mapping = strategy_map or default_strategy_map()
    if path.is_dir():
        wanted = splits or ESCONV_SPLITS
        files = [path / f"{s}.jsonl" for s in wanted]
        if not any(f.exists() for f in files) and (path / "ESConv.json").exists():
            files = [path / "ESConv.json"]
        missing = [f.name for f in files if not f.exists()]
        if missing:
            raise InputError(f"missing ESConv file(s): {', '.join(missing)}", location=str(path))
        return merge([load_esconv(f, strategy_map=mapping, strict=strict) for f in files])
    if not path.exists():
        raise InputError("no such file or directory", location=str(path))
    log = IssueLog(path, strict=strict)
    records = []
    if path.suffix == ".jsonl":
        source, items = "esconv", iter_jsonl(path, log)
    elif path.suffix == ".json":
        source = "esconv-failed" if path.stem.lower().startswith("failed") else "esconv"
        items = iter_json_list(path, log)
    else:
        raise InputError("expected a .jsonl (re-release) or .json (original) ESConv file", location=str(path))
    split = path.stem
    for number, (pos, obj) in enumerate(items):
        dialogue = _dialogue(obj, pos, f"{source}-{split}-{number}", source, split, mapping, log)
        if dialogue is not None:
            records.append(dialogue)
    return Loaded(records=records, issues=log.issues)


def _int_or_none(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _metadata(obj: dict[str, Any], pos: str, split: str, log: IssueLog) -> dict[str, Any]:
    meta: dict[str, Any] = {"split": split}
    for key in _TEXT_META:
        if key in obj:
            meta[key] = obj[key]
    survey = obj.get("survey_score") or {}
    if not isinstance(survey, dict):
        log.add(pos, "survey_score", "expected an object")
        survey = {}
    for who, keys in _SURVEY.items():
        part = survey.get(who) or {}
        for key in keys:
            raw = part.get(key) if isinstance(part, dict) else None
            value = _int_or_none(raw)
            if raw not in (None, "") and value is None:
                log.add(pos, f"survey_score.{who}.{key}", f"not an integer score: {raw!r}")
            meta[f"{who}_{key}"] = value
    return meta


def _dialogue(
    obj: dict[str, Any],
    pos: str,
    default_id: str,
    source: str,
    split: str,
    mapping: StrategyMap,
    log: IssueLog,
) -> SupportDialogue | None:
    dialog = obj.get("dialog")
    if not isinstance(dialog, list) or not dialog:
        log.add(pos, "dialog", "missing or empty list of utterances", dropped=True)
        return None
    meta = _metadata(obj, pos, split, log)
    roles: list[Role] = []
    texts: list[list[str]] = []
    labels: list[list[str] | None] = []
    feedback: list[list[int]] = []
    for j, utt in enumerate(dialog):
        where = f"dialog[{j}]"
        if not isinstance(utt, dict):
            log.add(pos, where, "expected an object", dropped=True)
            continue
        speaker = utt.get("speaker")
        role = _ROLES.get(str(speaker).strip().lower()) if speaker is not None else None
        if role is None:
            log.add(pos, f"{where}.speaker", f"unknown speaker {speaker!r}", dropped=True)
            continue
        text_key = "text" if "text" in utt else "content"
        text = utt.get(text_key)
        if not isinstance(text, str) or not text.strip():
            log.add(pos, f"{where}.{text_key}", "missing or empty text", dropped=True)
            continue
        annotation: dict[str, Any] = utt["annotation"] if isinstance(utt.get("annotation"), dict) else {}
        strategy = utt.get("strategy", annotation.get("strategy"))
        strategy_field = f"{where}.annotation.strategy" if "annotation" in utt else f"{where}.strategy"
        utt_labels: list[str] | None = None
        if role == "assistant":
            if isinstance(strategy, str) and strategy.strip():
                if mapping.knows(strategy):
                    utt_labels = [mapping.canonical(strategy)]
                else:
                    log.add(pos, strategy_field, f"unknown strategy {strategy!r} (kept, counts for no dimension)")
                    utt_labels = [strategy.strip()]
            else:
                log.add(pos, strategy_field, "supporter utterance has no strategy")
        if roles and roles[-1] == role:
            texts[-1].append(text.strip())
            if utt_labels is not None:
                labels[-1] = (labels[-1] or []) + utt_labels
        else:
            roles.append(role)
            texts.append([text.strip()])
            labels.append(utt_labels)
        score = annotation.get("feedback")
        if role == "user" and score not in (None, ""):
            value = _int_or_none(score)
            if value is None:
                log.add(pos, f"{where}.annotation.feedback", f"not an integer score: {score!r}")
            else:
                feedback.append([len(roles) - 1, value])
    if not roles:
        log.add(pos, "dialog", "no usable utterance", dropped=True)
        return None
    if source == "esconv-failed" or feedback:
        meta["feedback"] = feedback
    messages = tuple(Message(role=r, content="\n".join(t)) for r, t in zip(roles, texts, strict=True))
    strategies = tuple(tuple(lab) if lab is not None else None for lab in labels)
    return SupportDialogue(
        id=str(obj.get("id", default_id)), source=source, messages=messages, strategies=strategies, metadata=meta
    )
