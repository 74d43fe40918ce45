"""A multi-turn emotional-support environment for SkyRL (``skyrl-gym``) whose ``step`` returns CARE's turn reward.

SkyRL's generator makes one environment per rollout (``skyrl_gym.make(env_class, env_config=...,
extras=row_extras)``), calls ``init(prompt)``, then ``step(reply)`` after every policy turn. A step's
``observations`` become the next messages of the conversation and its ``reward`` lands on the last
token of that assistant turn; a ``None`` reward is skipped. :class:`CareSupportEnv` plays that game:

- the policy's reply is scored with CARE against the conversation before it (its own rubric);
- the user's next message comes from ``extras["user_replies"]`` (a scripted list, for tests and
  replayed dialogues) or from a chat-completion model (``env_config.user``: any CARE backend spec,
  e.g. ``openai:MODEL@URL``), playing ``extras["persona"]``;
- the episode ends after ``max_turns`` policy turns, or when the user has nothing more to say.

``how`` takes :class:`~care_sdk.TrajectoryReward`'s options: ``None`` (default) returns each turn's
reward at its step; ``"mean"``, ``"discounted"`` or ``"last"`` return ``None`` until the last step
and then the episode reward (``"last"`` scores only the final turn). Register it once per process::

    from care_sdk.integrations.skyrl import register_env
    register_env()                    # id "care_support"; dataset rows: env_class="care_support"

Examples:
    >>> from care_sdk import AdaptiveReward
    >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
    >>> backend = ScriptedBackend(lambda req: rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
    ...                           if req.purpose == "rubric" else evaluation_json([5, 5, 5, 5, 1, 1]))
    >>> env = CareSupportEnv(extras={"user_replies": ["It was ten years."], "max_turns": 2},
    ...                      reward=AdaptiveReward.from_backend(backend))
    >>> _ = env.init([{"role": "user", "content": "I lost my job."}])
    >>> out = env.step("I'm so sorry.")
    >>> out["reward"], out["done"], out["observations"]
    (0.75, False, [{'role': 'user', 'content': 'It was ten years.'}])
    >>> out = env.step("That is a long time.")
    >>> out["reward"], out["done"], env.get_metrics()["care/turns"]
    (0.75, True, 2.0)
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from care_sdk.audit import context_key as group_key
from care_sdk.errors import CareError, ConfigError, MissingDependencyError
from care_sdk.provenance import cost_metrics
from care_sdk.reward import AdaptiveReward
from care_sdk.trajectory import Aggregation, aggregate_turn_rewards
from care_sdk.types import DIMENSIONS, Message, Messages, RewardResult, dialogue_turns

try:
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # type: ignore[import-untyped]
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is installed wherever this module is used
    raise MissingDependencyError("skyrl_gym", extra="skyrl") from exc

__all__ = ["DEFAULT_USER_SYSTEM", "CareSupportEnv", "register_env"]

DEFAULT_USER_SYSTEM = (
    "You are role-playing a person who has come to an emotional supporter for help. Stay in character and "
    "never say that you are an AI. {persona}\nAfter each supporter message, write your next message as this "
    "person: one to three sentences. When you feel helped enough or want to leave, answer exactly [END]."
)
"""The chat-completion user's system prompt; ``{persona}`` is the row's ``extras["persona"]``."""

_END = "[END]"
_SEEN: OrderedDict[str, None] = OrderedDict()
_LOCKS: dict[str, threading.Lock] = {}
_GUARD = threading.Lock()


def _option(config: Any, name: str, default: Any) -> Any:
    if config is None:
        return default
    value = config.get(name, default) if isinstance(config, Mapping) or hasattr(config, "get") else None
    if value is None:
        value = getattr(config, name, default)
    return default if value is None else value


def _score_shared(reward: AdaptiveReward, context: Messages, reply: str) -> RewardResult:
    """Score one reply; the first reply to a context writes its rubric while the others wait to read it."""
    key = f"{id(reward)}:{group_key(context)}"
    with _GUARD:
        lock = _LOCKS.setdefault(key, threading.Lock())
    with lock:
        first = key not in _SEEN
        if first:
            result = reward.score_batch([(context, reply)])[0]
            with _GUARD:
                _SEEN[key] = None
                while len(_SEEN) > 4096:
                    _LOCKS.pop(_SEEN.popitem(last=False)[0], None)
    return result if first else reward.score_batch([(context, reply)])[0]


class CareSupportEnv(BaseTextEnv):  # type: ignore[misc]  # skyrl-gym ships no type information
    """A SkyRL text environment for support dialogue: CARE scores each policy turn, a user answers.

    Args:
        env_config: SkyRL's per-environment config (``skyrl_gym_config.care_support``; a mapping,
            DictConfig or object). Keys: ``backend``, ``cache``, ``add_ons``, ``variant``
            (the reward, as :func:`care_sdk.integrations.verl.get_reward`); ``how``,
            ``gamma``; ``on_error`` (``"raise"`` or ``"none"``); ``user`` (a backend spec for the
            chat-completion user), ``user_system``, ``user_max_tokens``, ``user_temperature``.
        extras: the dataset row's extras: ``user_replies`` (scripted user turns), ``persona``,
            ``max_turns`` (SkyRL sets it from its generator config).
        reward: a reward to use instead of building one from ``env_config``.
        user: a user backend (object or spec) to use instead of ``env_config.user``.

    Raises:
        ConfigError: an unknown ``how`` or ``on_error``, ``gamma`` outside [0, 1], or no user
            (neither ``user_replies`` nor a user model).

    Examples:
        >>> from care_sdk import AdaptiveReward, Rubric
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json
        >>> reward = AdaptiveReward.from_backend(ScriptedBackend(lambda r: evaluation_json([5] * 6)),
        ...                                      rubric=Rubric.uniform_fixed())
        >>> env = CareSupportEnv(extras={"user_replies": [], "max_turns": 1}, reward=reward)
        >>> _ = env.init([{"role": "user", "content": "I lost my job."}])
        >>> out = env.step("That is a shock.")
        >>> out["reward"], out["done"]
        (1.0, True)
    """

    def __init__(
        self,
        env_config: Any = None,
        extras: Mapping[str, Any] | None = None,
        *,
        reward: AdaptiveReward | None = None,
        user: Any = None,
    ) -> None:
        super().__init__()
        extras = dict(extras or {})
        self.how: Aggregation | None = _option(env_config, "how", None)
        self.gamma = float(_option(env_config, "gamma", 0.9))
        self.on_error = str(_option(env_config, "on_error", "raise"))
        if self.how not in (None, "mean", "last", "discounted"):
            raise ConfigError(f"how must be None, 'mean', 'last' or 'discounted', got {self.how!r}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"gamma must be in [0, 1], got {self.gamma}")
        if self.on_error not in ("raise", "none"):
            raise ConfigError(f"on_error must be 'raise' or 'none', got {self.on_error!r}")
        self.max_turns = int(extras.get("max_turns") or _option(env_config, "max_turns", 5))
        self.scripted: list[str] | None = None if extras.get("user_replies") is None else list(extras["user_replies"])
        self.persona = str(extras.get("persona") or "")
        self.user_system = str(_option(env_config, "user_system", DEFAULT_USER_SYSTEM))
        self.user_max_tokens = int(_option(env_config, "user_max_tokens", 160))
        self.user_temperature = float(_option(env_config, "user_temperature", 0.7))
        user = user if user is not None else _option(env_config, "user", None)
        if self.scripted is None and not user:
            raise ConfigError("care_support env: give extras['user_replies'] or a user model (env_config.user)")
        self._user_spec = user
        if reward is None:
            from care_sdk.integrations.verl import get_reward

            reward = get_reward(
                _option(env_config, "backend", None),
                variant=str(_option(env_config, "variant", "care")),
                cache=_option(env_config, "cache", None),
                add_ons=_option(env_config, "add_ons", None),
            )
        self.reward = reward
        self.chat_history: list[dict[str, str]] = []
        self.results: list[RewardResult] = []

    def init(self, prompt: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start the episode on the row's prompt (returned unchanged for the policy)."""
        self.chat_history = [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]
        self.turns, self.results = 0, []
        return [dict(m) for m in prompt], {}

    def _context(self) -> Messages:
        return dialogue_turns(self.chat_history)

    def next_user_message(self, dialogue: Messages) -> str | None:
        """The user's next message after ``dialogue`` (its user and assistant turns so far), or ``None`` when
        the user ends the conversation (override to plug any user).

        From the scripted list when the row has one, else from the chat-completion user (the dialogue
        with roles swapped, under :data:`DEFAULT_USER_SYSTEM`); ``[END]`` or an empty reply ends it.

        Raises:
            CareError: the user model failed (the episode stops with the reason).
        """
        if self.scripted is not None:
            return self.scripted.pop(0) if self.scripted else None
        from care_sdk.backends import GenerationRequest, resolve_backend

        if not hasattr(self._user_spec, "generate"):
            self._user_spec = resolve_backend(self._user_spec)
        swapped = {"user": "assistant", "assistant": "user"}
        messages = (
            Message(role="system", content=self.user_system.replace("{persona}", self.persona)),
            *(Message(role=swapped[m.role], content=m.content) for m in dialogue),
        )
        request = GenerationRequest(
            messages=messages,
            max_tokens=self.user_max_tokens,
            temperature=self.user_temperature,
            purpose="simulated user",
        )
        result = self._user_spec.generate([request])[0]
        if result.error is not None:
            raise CareError(f"care_support env: the user model failed: {result.error}")
        text = result.completions[0].text.strip()
        return None if not text or text.startswith(_END) else text

    def step(self, action: str) -> Any:
        """Score the policy's reply, ask the user for the next message; SkyRL's step output.

        Raises:
            CareError: the reply could not be scored and ``on_error="raise"`` (SkyRL stops the
                rollout with the reason), or the user model failed.
        """
        self.turns += 1
        context = self._context()
        self.chat_history.append({"role": "assistant", "content": action})
        done = self.turns >= self.max_turns
        observations: list[dict[str, str]] = []
        if not done:
            message = self.next_user_message(self._context())
            if message is None:
                done = True
            else:
                observations = [{"role": "user", "content": message}]
                self.chat_history.append(observations[0])
        metadata: dict[str, Any] = {"care_turn": self.turns}
        reward: float | None = None
        if self.how != "last" or done:
            result = _score_shared(self.reward, context, action.strip())
            self.results.append(result)
            metadata.update(self._explain(result))
            if result.reward is None and self.on_error == "raise":
                raise CareError(f"care_support env, turn {self.turns}: {result.error}")
            reward = result.reward
        if self.how is not None:
            reward = self._episode() if done else None
        return BaseTextEnvStepOutput(observations=observations, reward=reward, done=done, metadata=metadata)

    def _episode(self) -> float | None:
        rewards = [r.reward for r in self.results]
        return aggregate_turn_rewards(rewards, self.how or "mean", gamma=self.gamma) if rewards else None

    @staticmethod
    def _explain(result: RewardResult) -> dict[str, Any]:
        out: dict[str, Any] = {"care_reward": result.reward, "care_error": result.error}
        for dim in DIMENSIONS:
            out[f"care_{dim.value}"] = result.dimension_scores.get(dim) if result.dimension_scores else None
            out[f"care_weight_{dim.value}"] = result.rubric.weights[dim] if result.rubric is not None else None
        return out

    def get_metrics(self) -> dict[str, Any]:
        """Episode metrics SkyRL averages over episodes: ``care/turns``, ``care/failed_turns``,
        ``care/mean_turn_reward``, ``care/episode_reward``, per-dimension means and the episode's cost over
        its turns (``care/cost/calls``, ``care/cost/seconds``, ``care/cost/prompt_tokens``,
        ``care/cost/completion_tokens``; see :func:`care_sdk.provenance.cost_metrics`)."""
        scored = [r for r in self.results if r.reward is not None]
        episode = self._episode() if self.results else None
        out: dict[str, Any] = {
            "care/turns": float(len(self.results)),
            "care/failed_turns": float(len(self.results) - len(scored)),
            "care/mean_turn_reward": math.fsum(r.reward or 0.0 for r in scored) / len(scored) if scored else math.nan,
            "care/episode_reward": math.nan if episode is None else episode,
        }
        for dim in DIMENSIONS:
            values = [r.dimension_scores[dim] for r in scored if r.dimension_scores and dim in r.dimension_scores]
            out[f"care/{dim.value}"] = math.fsum(values) / len(values) if values else math.nan
        out.update(cost_metrics(self.results, "care/cost/", total=True))
        return out


def register_env(env_id: str = "care_support") -> None:
    """Register :class:`CareSupportEnv` with skyrl-gym under ``env_id`` (once per process; again is a no-op).

    Examples:
        >>> import skyrl_gym
        >>> register_env()
        >>> "care_support" in skyrl_gym.registry
        True
    """
    import skyrl_gym  # type: ignore[import-untyped]

    if env_id not in skyrl_gym.registry:
        skyrl_gym.register(id=env_id, entry_point="care_sdk.integrations.skyrl:CareSupportEnv")
