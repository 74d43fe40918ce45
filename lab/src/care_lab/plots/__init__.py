"""Figures from scored records (``care plot``): weights by turn, dominant dimension by emotion,
rewards per variant and a per-criterion heatmap. Drawing needs the ``plot`` extra (matplotlib);
reading and summarising records (:mod:`care_sdk.report.records`) does not.

Examples:
    >>> from care_lab.plots import weights_by_turn
    >>> w = {"cognitive": 0.5, "affective": 0.25, "proactive": 0.25}
    >>> weights_by_turn([{"id": "a", "turn": 1, "rubric": {"weights": w}}])[1]["cognitive"]
    (0.5, 0.0, 1)
"""

from care_lab.plots.plots import PlotSummary, make_plots
from care_sdk.report.records import (
    dominant_by_emotion,
    heatmap_data,
    read_meta,
    read_records,
    rewards_by_variant,
    weights_by_turn,
)

__all__ = [
    "PlotSummary",
    "dominant_by_emotion",
    "heatmap_data",
    "make_plots",
    "read_meta",
    "read_records",
    "rewards_by_variant",
    "weights_by_turn",
]
