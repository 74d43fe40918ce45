"""Request bodies of the reward service: validation that names the bad field, and chat-template splitting.

OpenRLHF's remote reward protocol sends ``{"query": [...], "prompts": [...], "labels": [...]}``
where each query is the prompt and the policy's reply as one chat-templated text (decoded with
its special tokens). :func:`split_query` takes the reply off and reads the prompt's turns back
into chat messages for the ChatML (SmolLM2, Qwen) and Llama 3 templates; any other text is
passed on as one plain-text context, and the result says which was done.

Examples:
    >>> q = "<|im_start|>user\\nI failed my exam.<|im_end|>\\n<|im_start|>assistant\\nThat hurts.<|im_end|>"
    >>> split = split_query(q)
    >>> split.template, split.context, split.reply
    ('chatml', [{'role': 'user', 'content': 'I failed my exam.'}], 'That hurts.')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from care_sdk.errors import InputError
from care_sdk.types import Context

__all__ = [
    "SCORE_DETAILS",
    "RequestError",
    "SplitQuery",
    "parse_get_reward",
    "parse_score",
    "parse_score_options",
    "split_query",
]

Template = Literal["chatml", "llama3", "plain"]

_CHATML_TURN = re.compile(r"<\|im_start\|>([^\n<]+)\n(.*?)(?:<\|im_end\|>|(?=<\|im_start\|>)|\Z)", re.DOTALL)
_LLAMA3_TURN = re.compile(
    r"<\|start_header_id\|>([^<]+)<\|end_header_id\|>\n\n(.*?)(?:<\|eot_id\|>|(?=<\|start_header_id\|>)|\Z)", re.DOTALL
)
_CHATML_REPLY_HEAD = "<|im_start|>assistant\n"
_LLAMA3_REPLY_HEAD = "<|start_header_id|>assistant<|end_header_id|>\n\n"
_REPLY_ENDS = ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "</s>")
_PADDING = ("<|begin_of_text|>", "<|endoftext|>", "<|end_of_text|>", "<s>", "</s>")


class RequestError(InputError):
    """A request body the service cannot read; ``field`` names the place, e.g. ``query[3]``.

    Examples:
        >>> RequestError("must be a string", field="query[3]").field
        'query[3]'
    """

    def __init__(self, message: str, *, field: str | None = None, status: int = 422) -> None:
        self.field = field
        self.status = status
        super().__init__(message, location=field)


@dataclass(frozen=True)
class SplitQuery:
    """One query read back: the judged context, the reply, and how the text was read.

    ``template`` is ``chatml``, ``llama3`` or ``plain``; ``error`` is set (and ``reply`` empty)
    when no reply could be split off.

    Examples:
        >>> SplitQuery(context="I'm sad.", reply="Why?", template="plain").error is None
        True
    """

    context: Context
    reply: str
    template: Template
    error: str | None = None


def _clean_reply(text: str) -> str:
    cut = min((i for i in (text.find(end) for end in _REPLY_ENDS) if i >= 0), default=len(text))
    return text[:cut].strip()


def _strip_padding(text: str) -> str:
    for token in _PADDING:
        text = text.replace(token, "")
    return text


def _turns(pattern: re.Pattern[str], prompt: str) -> list[dict[str, str]]:
    messages = [{"role": role.strip(), "content": content.strip()} for role, content in pattern.findall(prompt)]
    while messages and messages[-1]["role"] == "assistant" and not messages[-1]["content"]:
        messages.pop()  # the generation prompt: an empty assistant header
    return messages


def _template_of(text: str) -> Template:
    if "<|im_start|>" in text:
        return "chatml"
    if "<|start_header_id|>" in text:
        return "llama3"
    return "plain"


def split_query(query: str, prompt: str | None = None) -> SplitQuery:
    """Split an OpenRLHF query (prompt + reply, chat-templated) into a context and the reply.

    When ``query`` starts with ``prompt``, the reply is the rest; otherwise it follows the last
    assistant header of the template. The prompt's turns become chat messages for ChatML and
    Llama 3 (the generation prompt's empty assistant header dropped); a prompt in no known
    template is one plain-text context. Special tokens after the reply (end of turn, end of
    text, padding) are removed.

    Examples:
        >>> llama = ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\\n\\nI'm lonely.<|eot_id|>"
        ...          "<|start_header_id|>assistant<|end_header_id|>\\n\\nI'm here.<|eot_id|>")
        >>> split_query(llama).context
        [{'role': 'user', 'content': "I'm lonely."}]
        >>> split_query("User: I'm lonely.\\nAssistant: I'm here.", "User: I'm lonely.\\nAssistant:").reply
        "I'm here."
        >>> split_query("no template, no prompt").error
        'cannot split the reply off: the query has no chat template and its prompt is not a prefix of it'
    """
    if prompt and query.startswith(prompt):
        template = _template_of(prompt)
        head, tail = prompt, query[len(prompt) :]
    else:
        template = _template_of(query)
        marker = {"chatml": _CHATML_REPLY_HEAD, "llama3": _LLAMA3_REPLY_HEAD}.get(template)
        at = query.rfind(marker) if marker else -1
        if marker is None or at < 0:
            what = "its assistant turn" if marker else "no chat template"
            return SplitQuery(
                context=query,
                reply="",
                template=template,
                error=f"cannot split the reply off: the query has {what} and its prompt is not a prefix of it",
            )
        head, tail = query[: at + len(marker)], query[at + len(marker) :]
    reply = _clean_reply(tail)
    if template == "plain":
        return SplitQuery(context=_strip_padding(head).strip(), reply=reply, template="plain")
    messages = _turns(_CHATML_TURN if template == "chatml" else _LLAMA3_TURN, head)
    if not messages:
        return SplitQuery(
            context=head, reply=reply, template=template, error="the prompt has no turns before the reply"
        )
    return SplitQuery(context=messages, reply=reply, template=template)


# -- request bodies --------------------------------------------------------------------------------


def _require_list(body: Mapping[str, Any], key: str, *, required: bool = True) -> list[Any] | None:
    value = body.get(key)
    if value is None:
        if required:
            raise RequestError("is required (a list)", field=key)
        return None
    if not isinstance(value, list):
        raise RequestError(f"must be a list, got {type(value).__name__}", field=key)
    return value


def _body(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise RequestError(f"the body must be a JSON object, got {type(body).__name__}", field="body")
    return body


def parse_get_reward(body: Any) -> tuple[list[str], list[str] | None]:
    """Read an OpenRLHF ``/get_reward`` body: the queries and, when sent, the prompts (labels are ignored).

    Raises:
        RequestError: a field is missing or of the wrong type, naming it (``query[3]``).

    Examples:
        >>> parse_get_reward({"query": ["a b"], "prompts": ["a"], "labels": [None]})
        (['a b'], ['a'])
        >>> parse_get_reward({"query": ["a", 3]})
        Traceback (most recent call last):
        ...
        care_sdk.serve.protocol.RequestError: query[1]: must be a string, got int
    """
    body = _body(body)
    queries = _require_list(body, "query")
    assert queries is not None
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise RequestError(f"must be a string, got {type(q).__name__}", field=f"query[{i}]")
    prompts = _require_list(body, "prompts", required=False)
    if prompts is not None:
        if len(prompts) != len(queries):
            raise RequestError(f"has {len(prompts)} values for {len(queries)} queries", field="prompts")
        for i, p in enumerate(prompts):
            if not isinstance(p, str):
                raise RequestError(f"must be a string, got {type(p).__name__}", field=f"prompts[{i}]")
    return list(queries), prompts


def _context(value: Any, field: str) -> Context:
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        raise RequestError("must be a string or a non-empty list of chat messages", field=field)
    for j, message in enumerate(value):
        where = f"{field}[{j}]"
        if not isinstance(message, dict):
            raise RequestError(f"must be an object, got {type(message).__name__}", field=where)
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                raise RequestError("must be a string", field=f"{where}.{key}")
        if message["role"] not in ("system", "user", "assistant"):
            raise RequestError(f"unknown role {message['role']!r}", field=f"{where}.role")
    return [{"role": m["role"], "content": m["content"]} for m in value]


SCORE_DETAILS = ("full", "reward")
"""``/v1/score``'s ``options.detail``: every field of each result, or only ``reward``, ``error``,
``flags`` and ``parts`` (a smaller answer for a trainer that reads the number alone)."""


def parse_score_options(body: Any) -> dict[str, str]:
    """Read a ``/v1/score`` body's optional ``options`` object: ``{"detail": "full" | "reward"}``.

    Raises:
        RequestError: ``options`` is not an object, names an unknown option or an unknown value.

    Examples:
        >>> parse_score_options({"items": []})
        {'detail': 'full'}
        >>> parse_score_options({"items": [], "options": {"detail": "reward"}})
        {'detail': 'reward'}
        >>> parse_score_options({"items": [], "options": {"weights": "uniform"}})
        Traceback (most recent call last):
        ...
        care_sdk.serve.protocol.RequestError: options.weights: unknown option; known: detail
    """
    raw = _body(body).get("options", {})
    if not isinstance(raw, dict):
        raise RequestError(f"must be an object, got {type(raw).__name__}", field="options")
    for key in raw:
        if key != "detail":
            raise RequestError("unknown option; known: detail", field=f"options.{key}")
    detail = raw.get("detail", "full")
    if detail not in SCORE_DETAILS:
        raise RequestError(f"must be one of {', '.join(SCORE_DETAILS)}; got {detail!r}", field="options.detail")
    return {"detail": detail}


def parse_score(body: Any) -> list[tuple[Context, str]]:
    """Read a ``/v1/score`` body ``{"items": [{"context": messages or text, "reply": str}]}`` (its
    ``options`` are read by :func:`parse_score_options`).

    Raises:
        RequestError: a field is missing or of the wrong type, naming it (``items[2].reply``).

    Examples:
        >>> parse_score({"items": [{"context": "I'm sad.", "reply": "Why?"}]})
        [("I'm sad.", 'Why?')]
        >>> parse_score({"items": [{"context": [{"role": "bot", "content": "hi"}], "reply": "x"}]})
        Traceback (most recent call last):
        ...
        care_sdk.serve.protocol.RequestError: items[0].context[0].role: unknown role 'bot'
    """
    body = _body(body)
    items = _require_list(body, "items")
    assert items is not None
    out: list[tuple[Context, str]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RequestError(f"must be an object, got {type(item).__name__}", field=f"items[{i}]")
        if not isinstance(item.get("reply"), str):
            raise RequestError("is required (a string)", field=f"items[{i}].reply")
        if "context" not in item:
            raise RequestError("is required (chat messages or text)", field=f"items[{i}].context")
        out.append((_context(item["context"], f"items[{i}].context"), item["reply"]))
    return out
