"""The benchmarks behind ``care bench``: the reward's quality and its robustness, for any backend.

``care bench robustness`` (:mod:`care_lab.bench.robustness`, :mod:`care_lab.bench.attacks`) scores
attacks on the reward with defences off and on. ``care bench quality`` (see
:mod:`care_lab.bench.cli`) asks whether the reward agrees with people and shifts priorities as the
dialogue moves: it runs five tasks on public data, comparing full CARE with its ablations and a
length-only baseline side by side:

- :mod:`care_lab.bench.metrics`: AUC, Spearman, preference pairs, bootstrap intervals (plain Python);
- :mod:`care_lab.bench.variants`: the variants and the scorer that shares their work;
- :mod:`care_lab.bench.tasks`: the tasks;
- :mod:`care_lab.bench.quality`: the resumable runner and the reports.

Examples:
    >>> from care_lab.bench import spearman
    >>> spearman([1, 2, 3], [1, 3, 2])
    0.5
"""

from care_lab.bench.metrics import Estimate, auc, bootstrap, pairwise_accuracy, preference_pairs, spearman
from care_lab.bench.quality import QualityReport, QualityRunner
from care_lab.bench.tasks import TASKS, DataPaths, Settings
from care_lab.bench.variants import VARIANTS, VariantScorer

__all__ = [
    "TASKS",
    "VARIANTS",
    "DataPaths",
    "Estimate",
    "QualityReport",
    "QualityRunner",
    "Settings",
    "VariantScorer",
    "auc",
    "bootstrap",
    "pairwise_accuracy",
    "preference_pairs",
    "spearman",
]
