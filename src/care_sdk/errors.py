"""The exception hierarchy: every error the SDK raises is a :class:`CareError`."""

from __future__ import annotations

__all__ = [
    "BackendError",
    "CareError",
    "ConfigError",
    "ContextOverflowError",
    "InputError",
    "MissingDependencyError",
    "OutputError",
]


class CareError(Exception):
    """Base class of every error raised by care-sdk.

    Examples:
        >>> try:
        ...     raise ConfigError("unknown backend spec 'foo'")
        ... except CareError as exc:
        ...     print(exc)
        unknown backend spec 'foo'
    """


class ConfigError(CareError, ValueError):
    """A setting, spec string or config file is invalid.

    Examples:
        >>> str(ConfigError("training.lr: must be positive"))
        'training.lr: must be positive'
    """


class MissingDependencyError(CareError, ImportError):
    """An optional dependency is not installed; the message names the install command.

    Examples:
        >>> err = MissingDependencyError("llama_cpp", extra="llamacpp")
        >>> "pip install" in str(err)
        True
    """

    def __init__(self, module: str, *, extra: str | None = None, command: str | None = None) -> None:
        self.module = module
        self.extra = extra
        if command is None:
            command = f'pip install "care-sdk[{extra}]"' if extra else f"pip install {module}"
        self.command = command
        super().__init__(f"the optional dependency {module!r} is not installed; install it with: {command}")


class InputError(CareError, ValueError):
    """Input data (a dialogue, a file line, a field) is invalid; ``location`` names where.

    Examples:
        >>> err = InputError("unknown role 'bot'", location="dialogues.jsonl:3: messages[1].role")
        >>> str(err)
        "dialogues.jsonl:3: messages[1].role: unknown role 'bot'"
    """

    def __init__(self, message: str, *, location: str | None = None) -> None:
        self.reason = message
        self.location = location
        super().__init__(f"{location}: {message}" if location else message)


class BackendError(CareError):
    """A backend call failed (transport, server or provider error).

    Attributes:
        retryable: whether trying again may succeed (rate limits, 5xx, timeouts).
        status_code: the HTTP status code, when there is one.
        provider: the backend that failed, e.g. ``"openai"`` or ``"llamacpp"``.
        hint: what the user can do about it.
        retry_after: seconds the server asked to wait, when it said so.

    Examples:
        >>> err = BackendError("rate limited", retryable=True, status_code=429, provider="openai")
        >>> err.retryable, err.status_code
        (True, 429)
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        status_code: int | None = None,
        provider: str | None = None,
        hint: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.retryable = retryable
        self.status_code = status_code
        self.provider = provider
        self.hint = hint
        self.retry_after = retry_after
        parts = [f"[{provider}]" if provider else "", f"HTTP {status_code}:" if status_code else "", message]
        text = " ".join(p for p in parts if p)
        if hint:
            text += f" (hint: {hint})"
        super().__init__(text)


class ContextOverflowError(BackendError):
    """The prompt (and the reply to read, if any) has more tokens than the model's context window.

    Raised by the backends that hold the model (llama.cpp, transformers), so that a caller can
    drop old messages and try again, where any other :class:`BackendError` would fail the same way.

    Attributes:
        tokens: how many tokens were asked for.
        limit: the model's context window in tokens.

    Examples:
        >>> err = ContextOverflowError(4465, 4096, provider="llamacpp")
        >>> isinstance(err, BackendError), err.tokens, err.limit
        (True, 4465, 4096)
        >>> str(err)
        '[llamacpp] 4465 tokens do not fit the context window of 4096 (hint: raise n_ctx or shorten the context)'
    """

    def __init__(
        self, tokens: int, limit: int, *, provider: str | None = None, hint: str = "raise n_ctx or shorten the context"
    ) -> None:
        self.tokens = tokens
        self.limit = limit
        super().__init__(f"{tokens} tokens do not fit the context window of {limit}", provider=provider, hint=hint)


class OutputError(CareError):
    """A model reply did not parse or validate, even after the allowed retries.

    Attributes:
        attempts: how many replies were tried.
        raw: the last raw reply text.

    Examples:
        >>> err = OutputError("rubric: weights: all weights are zero", attempts=3, raw="{}")
        >>> err.attempts
        3
    """

    def __init__(self, message: str, *, attempts: int = 1, raw: str | None = None) -> None:
        self.attempts = attempts
        self.raw = raw
        super().__init__(f"{message} (after {attempts} attempt{'s' if attempts != 1 else ''})")
