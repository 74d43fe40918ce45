"""Per-reply calls gathered into batches, so concurrent replies to one context share one rubric.

Stacks such as verifiers and slime score each rollout on its own, from many coroutines at once.
:class:`GroupScorer` collects the ``(context, reply)`` items submitted within a short window into
one :meth:`~care_sdk.AdaptiveReward.ascore_batch` call, and a batch that holds a context another
batch is still scoring waits for that batch first, so the rubric is read from the generator's cache
instead of written twice.

Examples:
    >>> import asyncio
    >>> from care_sdk import AdaptiveReward
    >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
    >>> backend = ScriptedBackend(lambda req: rubric_json({"cognitive": 1, "affective": 1, "proactive": 1})
    ...                           if req.purpose == "rubric" else evaluation_json([3] * 6))
    >>> scorer = GroupScorer(AdaptiveReward.from_backend(backend))
    >>> async def group():
    ...     return await asyncio.gather(*(scorer.score("I failed.", f"Reply {i}") for i in range(8)))
    >>> [r.reward for r in asyncio.run(group())] == [0.5] * 8, [r.purpose for r in backend.requests].count("rubric")
    (True, 1)
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from care_sdk.types import Context, Messages, RewardResult, as_messages

if TYPE_CHECKING:
    from care_sdk.reward import AdaptiveReward

__all__ = ["GroupScorer"]

_Item = tuple[Messages, str]


@dataclass
class _LoopState:
    pending: list[tuple[_Item, asyncio.Future[RewardResult]]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    inflight: dict[Messages, asyncio.Event] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class GroupScorer:
    """Scores replies submitted one at a time in batches, one rubric per context.

    Args:
        reward: the reward every batch is scored with.
        window_s: how long a batch waits after its first item for more to arrive.
        max_batch: a batch is scored at once when this many items wait.

    Examples:
        >>> from care_sdk import AdaptiveReward, Rubric
        >>> from care_sdk.testing import ScriptedBackend
        >>> GroupScorer(AdaptiveReward.from_backend(ScriptedBackend([]), rubric=Rubric.uniform_fixed())).window_s
        0.02
    """

    def __init__(self, reward: AdaptiveReward, *, window_s: float = 0.02, max_batch: int = 256) -> None:
        self.reward = reward
        self.window_s = window_s
        self.max_batch = max_batch
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = weakref.WeakKeyDictionary()

    async def score(self, context: Context, reply: str) -> RewardResult:
        """The result for one reply, scored in a batch with the replies submitted beside it.

        A reply that could not be scored is a result with ``reward=None`` and ``error``, as in
        :meth:`~care_sdk.AdaptiveReward.score_batch`.
        """
        loop = asyncio.get_running_loop()
        state = self._states.get(loop)
        if state is None:
            state = self._states[loop] = _LoopState()
        future: asyncio.Future[RewardResult] = loop.create_future()
        state.pending.append(((as_messages(context), reply), future))
        if len(state.pending) >= self.max_batch:
            self._flush(loop, state)
        elif state.timer is None:
            state.timer = loop.call_later(self.window_s, self._flush, loop, state)
        return await future

    def _flush(self, loop: asyncio.AbstractEventLoop, state: _LoopState) -> None:
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        batch, state.pending = state.pending, []
        if batch:
            task = loop.create_task(self._run(state, batch))
            state.tasks.add(task)
            task.add_done_callback(state.tasks.discard)

    async def _run(self, state: _LoopState, batch: list[tuple[_Item, asyncio.Future[RewardResult]]]) -> None:
        keys = {context for (context, _), _ in batch}
        earlier = [state.inflight[k] for k in keys if k in state.inflight]
        mine = {k: asyncio.Event() for k in keys if k not in state.inflight}
        state.inflight.update(mine)
        try:
            for event in earlier:  # the rubric another batch is writing: read it from the cache instead
                await event.wait()
            results = await self.reward.ascore_batch([item for item, _ in batch])
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            for key, event in mine.items():
                event.set()
                state.inflight.pop(key, None)
