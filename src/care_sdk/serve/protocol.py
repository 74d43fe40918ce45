"""The reward service's wire format: pydantic models of its request and response bodies, and
chat-template splitting.

The models are the contract: :class:`ScoreRequest` / :class:`ScoreResponse` (``/v1/score``),
:class:`GetRewardRequest` / :class:`GetRewardResponse` (OpenRLHF's ``/get_reward``) and
:class:`SlimeRewardRequest` (slime's remote reward). :func:`parse_body` reads a raw body into one
of them, or raises :class:`RequestError` naming the first bad field the way a client writes it
(``query[3]``, ``items[0].context[1].content``): 400 for a body that is not JSON, 422 otherwise.

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
    >>> parse_body(ScoreRequest, b'{"items": [{"context": "I failed.", "reply": "Oh no."}]}').items[0].reply
    'Oh no.'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic_core import PydanticCustomError

from care_sdk.errors import InputError
from care_sdk.profiles import ProfileField
from care_sdk.types import Context, Message, Messages, Provenance, RewardResult, as_messages

__all__ = [
    "REWARD_ONLY",
    "SCORE_DETAILS",
    "GetRewardRequest",
    "GetRewardResponse",
    "QueryDetail",
    "RequestError",
    "ScoreOptions",
    "ScoreRequest",
    "ScoreRequestItem",
    "ScoreResponse",
    "SlimeRewardRequest",
    "SplitQuery",
    "parse_body",
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


# -- bodies ----------------------------------------------------------------------------------------

ModelT = TypeVar("ModelT", bound=BaseModel)


def _field(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def parse_body(model: type[ModelT], raw: bytes | str) -> ModelT:
    """Read a raw JSON body into ``model``, naming the first bad field as a client writes it.

    Raises:
        RequestError: the body is not JSON (status 400, field ``body``), or a field is missing or
            of the wrong shape (status 422, the field named: ``query[3]``, ``options.detail``).

    Examples:
        >>> parse_body(GetRewardRequest, b'{"query": ["a b"], "prompts": ["a"], "labels": [null]}').prompts
        ['a']
        >>> parse_body(GetRewardRequest, b'{"query": ["a", 3]}')
        Traceback (most recent call last):
        ...
        care_sdk.serve.protocol.RequestError: query[1]: Input should be a valid string
        >>> parse_body(ScoreRequest, b"{not json")
        Traceback (most recent call last):
        ...
        care_sdk.serve.protocol.RequestError: body: the body is not JSON: key must be a string at line 1 column 2
    """
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_context=False)[0]
        if first["type"] == "json_invalid":
            reason = first["msg"].removeprefix("Invalid JSON: ")
            raise RequestError(f"the body is not JSON: {reason}", field="body", status=400) from None
        field = _field(tuple(first["loc"]))
        if first["type"] == "model_type" and field == "body":
            got = type(first["input"]).__name__
            raise RequestError(f"the body must be a JSON object, got {got}", field="body") from None
        raise RequestError(first["msg"], field=field) from None


_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(Annotated[list[Message], Field(min_length=1)])


def _text_or_messages(value: Any, handler: ValidatorFunctionWrapHandler) -> Messages:
    # one branch per JSON type, so an error is located inside the value sent (items[0].context[1].role)
    if isinstance(value, str):
        return as_messages(value)
    if not isinstance(value, list):
        raise PydanticCustomError("context_type", "must be a string or a non-empty list of chat messages")
    return as_messages(_MESSAGES.validate_python(value))


ContextField = Annotated[Messages, WrapValidator(_text_or_messages)]
"""A judged context on the wire: plain text (one user message) or a non-empty list of chat messages
(extra keys dropped), read as :data:`~care_sdk.types.Messages` where the request is parsed."""


class ScoreRequestItem(BaseModel):
    """One ``(context, reply)`` pair of a ``/v1/score`` request, with the user's profile when sent.

    Examples:
        >>> item = ScoreRequestItem.model_validate({"context": [{"role": "user", "content": "Sad."}], "reply": "Why?"})
        >>> item.pair, item.profile
        (((Message(role='user', content='Sad.'),), 'Why?'), None)
        >>> ScoreRequestItem.model_validate({"context": "Sad.", "reply": "Why?", "profile": "A widower."}).profile.text
        'A widower.'
        >>> parse_body(ScoreRequest, b'{"items": [{"context": "x", "reply": "y", "profile": {"traits": [1]}}]}')
        Traceback (most recent call last):
        ...
        care_sdk.serve.protocol.RequestError: items[0].profile.traits[0]: Input should be a valid string
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    context: ContextField
    """The dialogue before the reply: chat messages, or text taken as one user message."""
    reply: str
    """The reply to score."""
    profile: ProfileField = None
    """Who the user is (see :mod:`care_sdk.profiles`): free text or ``{"text", "traits", "history"}``;
    absent or ``null`` for none."""

    @property
    def pair(self) -> tuple[Messages, str]:
        """The item as the reward takes it."""
        return self.context, self.reply


SCORE_DETAILS = ("full", "reward")
"""``/v1/score``'s ``options.detail``: every field of each result, or only ``reward``, ``error``,
``flags`` and ``parts`` (a smaller answer for a trainer that reads the number alone)."""

REWARD_ONLY = frozenset({"reward", "error", "flags", "parts"})
"""The result fields that ``options.detail = "reward"`` keeps."""


class ScoreOptions(BaseModel):
    """``/v1/score``'s optional ``options`` object; an unknown option is refused.

    Examples:
        >>> ScoreOptions().detail
        'full'
        >>> parse_body(ScoreRequest, b'{"items": [], "options": {"weights": "uniform"}}')
        Traceback (most recent call last):
        ...
        care_sdk.serve.protocol.RequestError: options.weights: Extra inputs are not permitted
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    detail: Literal["full", "reward"] = "full"
    """``full``: each result whole; ``reward``: only ``reward``, ``error``, ``flags`` and ``parts``."""


class ScoreRequest(BaseModel):
    """The body of ``POST /v1/score``: ``{"items": [{"context": ..., "reply": ..., "profile": ...}], "options": {...}}``
    (``profile`` optional).

    Examples:
        >>> body = parse_body(ScoreRequest, b'{"items": [{"context": "I am sad.", "reply": "Why?"}]}')
        >>> [item.pair for item in body.items], body.options.detail
        ([((Message(role='user', content='I am sad.'),), 'Why?')], 'full')
        >>> parse_body(ScoreRequest, b'{"items": [{"context": [{"role": "bot", "content": "hi"}], "reply": "x"}]}')
        Traceback (most recent call last):
        ...
        care_sdk.serve.protocol.RequestError: items[0].context[0].role: Input should be 'system', 'user' or 'assistant'
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    items: list[ScoreRequestItem]
    """The pairs to score, answered in order."""
    options: ScoreOptions = ScoreOptions()
    """How much of each result to answer."""


class ScoreResponse(BaseModel):
    """The answer of ``POST /v1/score``: one :class:`~care_sdk.RewardResult` per item, in order.

    Examples:
        >>> ScoreResponse(results=[RewardResult(reward=0.5)]).body("reward")
        b'{"results":[{"reward":0.5,"error":null,"flags":[],"parts":[]}]}'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    results: list[RewardResult]
    """The results, in the order of the request's items, each with its ``provenance`` (with
    ``detail: reward``, without it)."""

    def body(self, detail: Literal["full", "reward"] = "full") -> bytes:
        """The JSON body: each result whole, or cut to :data:`REWARD_ONLY` (``options.detail``)."""
        keep = {"results": {"__all__": set(REWARD_ONLY)}} if detail == "reward" else None
        return self.__pydantic_serializer__.to_json(self, include=keep)


class GetRewardRequest(BaseModel):
    """The body of OpenRLHF's ``POST /get_reward``: ``{"query": [str], "prompts": [str], "labels": [...]}``.

    ``labels`` (and any other key) is accepted and ignored; ``prompts``, when sent, has one entry per query.

    Examples:
        >>> parse_body(GetRewardRequest, b'{"query": ["a b"], "prompts": ["a"], "labels": [null]}').query
        ['a b']
        >>> parse_body(GetRewardRequest, b'{"query": ["a"], "prompts": ["a", "b"]}')
        Traceback (most recent call last):
        ...
        care_sdk.serve.protocol.RequestError: prompts: has 2 values for 1 queries
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    query: list[str]
    """Each query: the prompt and the policy's reply as one chat-templated text."""
    prompts: list[str] | None = None
    """The prompt of each query, when sent: the reply is what follows it."""

    @field_validator("prompts")
    @classmethod
    def _one_per_query(cls, prompts: list[str] | None, info: ValidationInfo) -> list[str] | None:
        queries = info.data.get("query")
        if prompts is not None and queries is not None and len(prompts) != len(queries):
            raise PydanticCustomError(
                "length_mismatch", "has {got} values for {want} queries", {"got": len(prompts), "want": len(queries)}
            )
        return prompts

    def splits(self) -> list[SplitQuery]:
        """Each query split into its context and reply (see :func:`split_query`).

        Examples:
            >>> body = GetRewardRequest(query=["User: hi\\nAssistant: hello"], prompts=["User: hi\\nAssistant:"])
            >>> body.splits()[0].reply
            'hello'
        """
        prompts = self.prompts
        return [split_query(q, prompts[i] if prompts else None) for i, q in enumerate(self.query)]


class QueryDetail(BaseModel):
    """How one ``/get_reward`` query was read and scored (``details`` in the answer).

    Examples:
        >>> QueryDetail(template="plain", context="hi", reply_chars=5, error=None, flags=[]).template
        'plain'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    template: Template
    """The chat template the query was read with: ``chatml``, ``llama3`` or ``plain``."""
    context: Context
    """The judged context: chat messages read back from the template, or the prompt's text."""
    reply_chars: int
    """The reply's length in characters."""
    error: str | None
    """Why no reward was computed, or ``None``."""
    flags: list[str]
    """The guards' flags on the reply."""
    provenance: Provenance | None = None
    """What produced the reward and what it cost (see :mod:`care_sdk.provenance`); ``None`` for a
    query whose reply could not be split off."""


class GetRewardResponse(BaseModel):
    """The answer of ``POST /get_reward``, in OpenRLHF's shape.

    ``rewards`` and ``scores`` are the same numbers, ``None`` where no reward was computed (never 0);
    ``extra_logs`` holds one number per query for each key (OpenRLHF turns every value into a
    tensor); ``details`` holds the words.

    Examples:
        >>> GetRewardResponse(rewards=[0.5], scores=[0.5], extra_logs={"care_failed": [0.0]}, details=[]).body()
        b'{"rewards":[0.5],"scores":[0.5],"extra_logs":{"care_failed":[0.0]},"details":[]}'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rewards: list[float | None]
    """One reward per query, ``None`` where none could be computed."""
    scores: list[float | None]
    """The same numbers as ``rewards`` (OpenRLHF reads either)."""
    extra_logs: dict[str, list[float]]
    """Per key one number per query: ``care_failed``, ``care_flagged``, ``care_template_<name>``,
    ``care_cost_calls``, ``care_cost_seconds`` and, when the backend reports tokens,
    ``care_cost_prompt_tokens`` and ``care_cost_completion_tokens``."""
    details: list[QueryDetail]
    """Per query: the template, the judged context, the reply's length, the error, the flags and the
    reward's provenance."""

    def body(self) -> bytes:
        """The JSON body."""
        return self.__pydantic_serializer__.to_json(self)


def _slime_prompt(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value:
        if not all(isinstance(m, dict) and "role" in m and "content" in m for m in value):
            raise PydanticCustomError("chat_messages", "must be chat messages with role and content")
        return value
    raise PydanticCustomError("prompt_type", "is required (templated text or chat messages)")


class SlimeRewardRequest(BaseModel):
    """The body of slime's remote reward (``--rm-type remote_rm``): ``{"prompt", "response", "label"}``.

    ``label`` (and any other key) is accepted and ignored.

    Examples:
        >>> parse_body(SlimeRewardRequest, b'{"prompt": "I failed.", "response": "Oh no.", "label": null}').response
        'Oh no.'
        >>> parse_body(SlimeRewardRequest, b'{"response": "x"}')
        Traceback (most recent call last):
        ...
        care_sdk.serve.protocol.RequestError: prompt: Field required
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    prompt: Annotated[str | list[dict[str, Any]], WrapValidator(_slime_prompt)]
    """The policy's prompt: chat-templated text, or chat messages."""
    response: str
    """The policy's reply."""
