"""The method's evaluation protocol, behind ``care eval``: numbers judged apart from the training reward.

- :mod:`care_lab.evals.pairs`: held-out preference pairs (a build-data pairs file whose declared
  role is held out, or Lend-an-Ear's held-out conversations, split once in
  :mod:`care_lab.data.splits`);
- :mod:`care_lab.evals.winrate`: the generator's held-out preference win rate (``care eval
  generator``), several generators and the ablations side by side, with bootstrap intervals;
- :mod:`care_lab.evals.simuser` and :mod:`care_lab.evals.simuser_run`: SAGE-style simulated users
  whose emotion moves each turn (``care eval sim-user``);
- :mod:`care_lab.evals.eqbench3` and :mod:`care_lab.evals.eqbench3_run`: EQ-Bench 3's scenarios,
  judged with the benchmark's rubric and pairwise prompts (``care eval eqbench3``);
- :mod:`care_lab.evals.cli`: the ``care eval`` commands.

The simulated users' profiles, the episode loop and the independent dialogue judge are shared with
policy training and live in :mod:`care_lab.simulation`.

Importing this package is light; the runners import their models when they run.

Examples:
    >>> import care_lab.evals
    >>> care_lab.evals.__name__
    'care_lab.evals'
"""

from __future__ import annotations

__all__: list[str] = []
