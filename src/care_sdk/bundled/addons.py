"""The bundled add-ons as the core's seams: weight readers for the generator, and their builders by name.

Each add-on is outside the method and off unless asked for:

- :class:`WeightsHeadReader`: the rubric's weights read by a :class:`~care_sdk.bundled.weights_head.WeightsHead`
  on the model's hidden states (``weights-head``);
- :class:`ExpectedWeightsReader`: the weights read as expectations over 0-10 at their slots
  (:mod:`care_sdk.bundled.expected_weights`; ``expected-weights``);
- :class:`~care_sdk.bundled.context_fit.ContextFit`: the reward scaled by the reply's fit to its
  context (``context-fit``).

:func:`weights_head`, :func:`expected_weights` and :func:`context_fit` build them from an optional
spec; the core reaches them by name through :data:`care_sdk.addons.ADD_ONS`.

Examples:
    >>> from care_sdk import RubricGenerator
    >>> generator = RubricGenerator("default", weight_reader=WeightsHeadReader())  # doctest: +SKIP
    >>> generator.identity.rsplit("|", 1)[-1]  # doctest: +SKIP
    'weights=head-...'
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from care_sdk.addons import WeightRead
from care_sdk.backends.base import Backend, ForcedReplies, HiddenStates
from care_sdk.bundled.expected_weights import DEFAULT_BRANCH, expected_weights_plan
from care_sdk.bundled.weights_head import WeightsHead, bundled_weights_head
from care_sdk.errors import CareError, ConfigError
from care_sdk.plans import Plan, offload
from care_sdk.types import Dimension

if TYPE_CHECKING:
    from care_sdk.bundled.context_fit import ContextFit

__all__ = ["ExpectedWeightsReader", "WeightsHeadReader", "context_fit", "expected_weights", "weights_head"]


class WeightsHeadReader:
    """A :class:`~care_sdk.addons.WeightReader`: the weights read by a weights head on the model's
    hidden states of the generator's prompt.

    Args:
        head: the head; ``None`` is the one shipped beside the bundled generator adapter.

    Raises:
        ConfigError: ``head=None`` and this build ships no weights head.

    Examples:
        >>> head = WeightsHead(layer=1, position_cap=0, mean=[0.0], scale=[1.0], coef=[[0.0] * 3] * 3)
        >>> reader = WeightsHeadReader(head)
        >>> reader.name, reader.identity == f"head-{head.digest}"
        ('weights_head', True)
    """

    name = "weights_head"

    def __init__(self, head: WeightsHead | None = None) -> None:
        if head is None:
            head = bundled_weights_head()
            if head is None:
                raise ConfigError("weights head: this build of care-sdk ships no weights head")
        self.head = head

    @property
    def identity(self) -> str:
        """``head-`` and the head's digest."""
        return f"head-{self.head.digest}"

    def check(self, backend: Backend, *, prompt_version: str) -> None:
        """The backend must read hidden states, and the head fit its prompt version and model file."""
        if not isinstance(backend, HiddenStates):
            raise ConfigError(f"a weights head needs a backend that reads hidden states; {backend!r} does not")
        inner = getattr(backend, "inner", backend)  # a wrapper answers with its inner model
        model = getattr(backend, "model_path", None) or getattr(inner, "model_path", "")
        self.head.require(prompt_version=prompt_version, model=str(model))

    def read(self, reads: Sequence[WeightRead], backend: Backend) -> Plan[dict[Dimension, float]]:
        """Each read's weights (its error where the states could not be read); a blocking call, offloaded."""
        weights: list[dict[Dimension, float] | CareError] = yield from offload(partial(self._read, reads, backend))
        return weights

    def _read(self, reads: Sequence[WeightRead], backend: Backend) -> list[dict[Dimension, float] | CareError]:
        out: list[dict[Dimension, float] | CareError] = []
        for item in reads:
            try:
                out.append(self.head.weights([item.context], backend)[0])
            except CareError as exc:
                out.append(exc)
        return out

    def __repr__(self) -> str:
        return f"WeightsHeadReader({self.identity!r})"


class ExpectedWeightsReader:
    """A :class:`~care_sdk.addons.WeightReader`: the weights read as expectations under the model's
    distribution over 0-10 at each slot (forced reads; see :mod:`care_sdk.bundled.expected_weights`).

    Args:
        branch: values of each of the first two slots followed further.

    Examples:
        >>> reader = ExpectedWeightsReader()
        >>> reader.name, reader.identity
        ('expected_weights', 'expected')
    """

    name = "expected_weights"

    def __init__(self, branch: int = DEFAULT_BRANCH) -> None:
        if branch < 1:
            raise ConfigError(f"expected weights: branch must be at least 1, got {branch}")
        self.branch = branch

    @property
    def identity(self) -> str:
        """``expected`` (and the branch when it is not the default)."""
        return "expected" if self.branch == DEFAULT_BRANCH else f"expected-{self.branch}"

    def check(self, backend: Backend, *, prompt_version: str) -> None:
        """The backend must build forced replies (:class:`~care_sdk.backends.base.ForcedReplies`)."""
        if not isinstance(backend, ForcedReplies):
            raise ConfigError(f"expected weights need a backend that builds forced replies; {backend!r} does not")

    def read(self, reads: Sequence[WeightRead], backend: Backend) -> Plan[dict[Dimension, float]]:
        """Each read's expected weights, from forced reads of its request's prompt."""
        return expected_weights_plan([item.request for item in reads], self.branch)

    def __repr__(self) -> str:
        return f"ExpectedWeightsReader(branch={self.branch})"


def weights_head(spec: str | None = None) -> WeightsHeadReader:
    """The ``weights-head`` add-on: the bundled head, or the head saved at ``spec`` (a JSON file).

    Examples:
        >>> weights_head("missing.json")
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: missing.json: cannot read weights head: No such file or directory
    """
    return WeightsHeadReader(None if spec is None else WeightsHead.load(Path(spec)))


def expected_weights(spec: str | None = None) -> ExpectedWeightsReader:
    """The ``expected-weights`` add-on; ``spec``, when given, is the branch (an integer).

    Examples:
        >>> expected_weights().branch, expected_weights("2").branch
        (3, 2)
    """
    if spec is None:
        return ExpectedWeightsReader()
    try:
        return ExpectedWeightsReader(int(spec))
    except ValueError:
        raise ConfigError(f"add-on expected-weights={spec}: the spec is a branch, a whole number") from None


def context_fit(spec: str | None = None) -> ContextFit:
    """The ``context-fit`` add-on: a :class:`~care_sdk.bundled.context_fit.ContextFit` read on the
    bundled base model, or on the backend ``spec`` names (llamacpp and hf specs can read it).

    Examples:
        >>> context_fit("openai:gpt-4o-mini")  # doctest: +SKIP
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: context fit needs a backend that reads the log-probability of a given reply; ...
    """
    from care_sdk.bundled.context_fit import ContextFit

    return ContextFit() if spec is None else ContextFit(spec)
