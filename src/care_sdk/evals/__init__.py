"""The method's evaluation protocol, behind ``care eval``: numbers judged apart from the training reward.

- :mod:`care_sdk.evals.pairs`: held-out preference pairs (a build-data pairs file whose declared
  role is held out, or Lend-an-Ear's held-out conversations, split once in
  :mod:`care_sdk.data.splits`);
- :mod:`care_sdk.evals.winrate`: the generator's held-out preference win rate (``care eval
  generator``), several generators and the ablations side by side, with bootstrap intervals;
- :mod:`care_sdk.evals.judge`: an independent dialogue judge (also ``care train eval-policy``'s default);
- :mod:`care_sdk.evals.simuser` and :mod:`care_sdk.evals.simuser_run`: SAGE-style simulated users
  whose emotion moves each turn (``care eval sim-user``);
- :mod:`care_sdk.evals.eqbench3` and :mod:`care_sdk.evals.eqbench3_run`: EQ-Bench 3's scenarios,
  judged with the benchmark's rubric and pairwise prompts (``care eval eqbench3``);
- :mod:`care_sdk.evals.cli`: the ``care eval`` commands.

Importing this package is light; the runners import their models when they run.

Examples:
    >>> import care_sdk.evals
    >>> care_sdk.evals.__name__
    'care_sdk.evals'
"""

from __future__ import annotations

__all__: list[str] = []
