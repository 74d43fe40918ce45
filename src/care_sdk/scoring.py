"""Old name of :mod:`care_sdk.score_files` (scoring logged dialogue files, behind ``care score``).

Kept so that existing imports keep working; new code imports :mod:`care_sdk.score_files`.

Examples:
    >>> from care_sdk.scoring import score_file
    >>> from care_sdk import score_files
    >>> score_file is score_files.score_file
    True
"""

from care_sdk.score_files import ScoreSummary, load_records, score_file, scored_by, turn_record

__all__ = ["ScoreSummary", "load_records", "score_file", "scored_by", "turn_record"]
