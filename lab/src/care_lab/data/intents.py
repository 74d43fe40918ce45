"""EmpatheticIntents: listener turns of EmpatheticDialogues with a listener intent, mapped to a dimension.

The data (``empatheticdialogues_intents/``, Welivita & Pu, COLING 2020) is a fresh ``test`` set:
read it once per shipped artifact, through :func:`care_lab.data.results.record_test_read`,
whose entry every loader here asks for.

The intent -> dimension mapping (``intent_map.json`` next to this module, package data) was
written before the data was read for any score, by analogy with the ESConv strategy mapping
(``strategy_map.json``):

- ``cognitive`` (understand and structure the user's view): ``questioning`` (ESConv *Question*),
  ``sharing_opinions`` (offers a view of the situation, as MINT's *reappraisal*).
- ``affective`` (recognise and validate feelings): ``acknowledging`` (*Reflection of feelings*),
  ``sympathizing``, ``consoling``, ``agreeing`` (MINT's *validation* / *solidarity*),
  ``appreciating``, ``expressing_care_concern``, ``expressing_relief`` (*Affirmation and
  Reassurance*), ``sharing_experience`` (*Self-disclosure*).
- ``proactive`` (build agency, move forward): ``suggesting``, ``advising`` (*Providing
  Suggestions*), ``encouraging`` (MINT's *empowerment*).
- none: ``wishing`` (congratulations, good luck: conventional, like MINT's *gratitude*),
  ``neutral``, ``disapproving``.

The automatic labels give some listener utterances an emotion instead of an intent (``sad``,
``hopeful``, ...): such a turn keeps its ``label`` with ``intent=None`` and no dimension.

Examples:
    >>> intent_map().dimension("questioning").value, intent_map().dimension("wishing") is None
    ('cognitive', True)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from care_lab.data._issues import IssueLog, Loaded
from care_lab.data._read import iter_csv
from care_lab.data.results import check_test_read
from care_lab.data.strategies import StrategyMap
from care_sdk.errors import InputError
from care_sdk.types import Dimension, Message

__all__ = [
    "INTENTS",
    "LEDGER_NAME",
    "IntentTurn",
    "ManualIntent",
    "intent_map",
    "load_intent_annotations",
    "load_intent_turns",
]

INTENTS: tuple[str, ...] = (
    "questioning",
    "acknowledging",
    "agreeing",
    "consoling",
    "encouraging",
    "sympathizing",
    "suggesting",
    "wishing",
    "neutral",
)
"""The intents of the automatic labels (listener utterances); the manual files add seven more."""

_FOLDER = "empatheticdialogues_intents"
LEDGER_NAME = "empatheticdialogues_intents"
"""The set's name in the test-read ledger: the entry a loader here is given must be a read of it."""


def intent_map() -> StrategyMap:
    """The listener intent -> dimension mapping (package data ``intent_map.json``).

    Examples:
        >>> intent_map().dimension("suggesting").value
        'proactive'
    """
    text = resources.files("care_lab.data").joinpath("intent_map.json").read_text(encoding="utf-8")
    return StrategyMap.model_validate(json.loads(text))


@dataclass(frozen=True)
class IntentTurn:
    """One listener turn: the dialogue so far, the listener's reply and its intent.

    Examples:
        >>> t = IntentTurn("hit:1_conv:2#1", "hit:1_conv:2", 1, "sad", (Message(role="user", content="I failed."),),
        ...                "What happened?", "questioning", "questioning", Dimension.COGNITIVE)
        >>> t.dimension.value
        'cognitive'
    """

    id: str
    """``<dialogue id>#<message index of the reply>``."""
    dialogue_id: str
    """EmpatheticDialogues' ``Dialog_ID``."""
    index: int
    """The reply's index in the dialogue (messages before it: ``context``)."""
    emotion: str
    """The situation's emotion label (the file it came from labels the situation)."""
    context: tuple[Message, ...]
    """The dialogue so far as chat messages: speaker = ``user``, listener = ``assistant``."""
    reply: str
    """The listener utterance."""
    label: str
    """The automatic label as given (an intent, or an emotion for some utterances)."""
    intent: str | None
    """The intent; ``None`` when the label is an emotion."""
    dimension: Dimension | None
    """The mapped dimension; ``None`` for intents that serve none and for emotion labels."""


@dataclass(frozen=True)
class ManualIntent:
    """One of the manually labelled listener utterances (no context).

    Examples:
        >>> ManualIntent("Oh no!", "sympathizing", Dimension.AFFECTIVE, "sympathizing.txt:line 1").intent
        'sympathizing'
    """

    text: str
    """The utterance."""
    intent: str
    """The manual intent (the file's name)."""
    dimension: Dimension | None
    """The mapped dimension."""
    source: str
    """``<file>:line N``."""


def _folder(path: str | Path, sub: str) -> Path:
    path = Path(path)
    if (path / _FOLDER).is_dir():
        path = path / _FOLDER
    return path / sub if (path / sub).is_dir() else path


def _require_read(test_read: object | None, where: Path) -> None:
    if test_read is None:
        raise InputError(
            "EmpatheticIntents is a test set: pass test_read=, the entry "
            "care_lab.data.results.record_test_read returned for this read",
            location=str(where),
        )
    check_test_read(test_read, LEDGER_NAME, where)


def load_intent_turns(path: str | Path, *, test_read: object | None, strict: bool = False) -> Loaded[IntentTurn]:
    """Every listener turn of the annotated subset (``annotated_subset/*.csv``), in file order.

    Args:
        path: the data directory, ``empatheticdialogues_intents/``, its ``annotated_subset/`` or one CSV file.
        test_read: the test-read ledger entry of this read (required: the data is ``test``).
        strict: raise at the first issue instead of recording it.

    Raises:
        InputError: no ledger entry, a file is missing, or (strict) a row is malformed.

    Examples:
        >>> load_intent_turns("/nowhere", test_read=None)
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: /nowhere: EmpatheticIntents is a test set: pass test_read=, ...
    """
    path = Path(path)
    _require_read(test_read, path)
    folder = path if path.is_file() else _folder(path, "annotated_subset")
    files = [folder] if folder.is_file() else sorted(folder.glob("*.csv"))
    if not files:
        raise InputError("no annotated_subset/*.csv file", location=str(folder))
    mapping = intent_map()
    turns: list[IntentTurn] = []
    issues = []
    for file in files:
        log = IssueLog(file, strict=strict)
        dialogues: dict[str, list[Message]] = {}
        for pos, row in iter_csv(file, log, ("Dialog_ID", "Type", "Actor", "Text", "Label")):
            if row["Type"] != "utterance":
                continue
            actor, text, dialogue_id = row["Actor"], row["Text"] or "", row["Dialog_ID"]
            if actor not in ("speaker", "listener") or not text.strip():
                log.add(pos, "Actor" if actor not in ("speaker", "listener") else "Text", "unusable row", dropped=True)
                continue
            messages = dialogues.setdefault(dialogue_id, [])
            role = "user" if actor == "speaker" else "assistant"
            if messages and messages[-1].role == role:
                messages[-1] = Message(role=role, content=f"{messages[-1].content}\n{text}")
                log.add(pos, "Actor", "two utterances in a row by the same actor: merged")
                continue
            if actor == "listener":
                label = row["Label"].strip()
                intent = label if mapping.knows(label) else None
                turns.append(
                    IntentTurn(
                        id=f"{dialogue_id}#{len(messages)}",
                        dialogue_id=dialogue_id,
                        index=len(messages),
                        emotion=file.stem,
                        context=tuple(messages),
                        reply=text,
                        label=label,
                        intent=intent,
                        dimension=mapping.dimension(intent) if intent else None,
                    )
                )
            messages.append(Message(role=role, content=text))
        issues += log.issues
    return Loaded(records=[t for t in turns if t.context], issues=issues)


def load_intent_annotations(path: str | Path, *, test_read: object | None) -> list[ManualIntent]:
    """The manually labelled listener utterances (``manual_intent_annotations/<intent>.txt``), a test set too.

    Raises:
        InputError: no ledger entry, no such folder, or a file names an intent the mapping lacks.

    Examples:
        >>> load_intent_annotations("/nowhere", test_read=None)
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: /nowhere: EmpatheticIntents is a test set: pass test_read=, ...
    """
    path = Path(path)
    _require_read(test_read, path)
    folder = _folder(path, "manual_intent_annotations")
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise InputError("no manual_intent_annotations/*.txt file", location=str(folder))
    mapping = intent_map()
    out: list[ManualIntent] = []
    for file in files:
        if not mapping.knows(file.stem):
            raise InputError(f"intent {file.stem!r} is not in the intent map", location=str(file))
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                where = f"{file.name}:line {number}"
                out.append(ManualIntent(line.strip(), file.stem, mapping.dimension(file.stem), where))
    return out
