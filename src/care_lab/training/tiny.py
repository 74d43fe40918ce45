"""Old name of :mod:`care_lab.training.models` (the recipe and test models, and the model resolver).

Kept so that existing imports keep working; new code imports :mod:`care_lab.training.models`.

Examples:
    >>> from care_lab.training.tiny import tiny_model_dir
    >>> from care_lab.training import models
    >>> tiny_model_dir is models.tiny_model_dir
    True
"""

from care_lab.training.models import bundled_model_dir, require_train, resolve_model, tiny_model_dir

__all__ = ["bundled_model_dir", "require_train", "resolve_model", "tiny_model_dir"]
