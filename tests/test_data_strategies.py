"""The strategy → dimension mapping: the documented default, aliases and user mappings."""

from __future__ import annotations

from pathlib import Path

import pytest

from care_lab.data import MINT_TACTICS, StrategyMap, UnknownStrategyError
from care_sdk.errors import ConfigError
from care_sdk.types import Dimension

C, A, P = Dimension.COGNITIVE, Dimension.AFFECTIVE, Dimension.PROACTIVE

DEFAULT = {
    "Question": C,
    "Restatement or Paraphrasing": C,
    "Reflection of feelings": A,
    "Self-disclosure": A,
    "Affirmation and Reassurance": A,
    "Providing Suggestions": P,
    "Information": P,
    "Others": None,
}


@pytest.mark.parametrize(("name", "dim"), list(DEFAULT.items()))
def test_default_maps_esconv_strategies(name: str, dim: Dimension | None) -> None:
    assert StrategyMap.default().dimension(name) is dim


@pytest.mark.parametrize(
    ("variant", "canonical"),
    [
        ("Questions", "Question"),
        ("Other", "Others"),
        ("Direct Guidance", "Providing Suggestions"),
        ("Approval and Reassurance", "Affirmation and Reassurance"),
        ("Restatement", "Restatement or Paraphrasing"),
        ("[Reflection of feelings]", "Reflection of feelings"),
        ("self-disclosure", "Self-disclosure"),
    ],
)
def test_original_release_spellings_are_aliases(variant: str, canonical: str) -> None:
    assert StrategyMap.default().canonical(variant) == canonical


def test_every_mint_tactic_is_mapped() -> None:
    mapping = StrategyMap.default()
    assert all(mapping.knows(t) for t in MINT_TACTICS)
    assert mapping.dimension("reappraisal") is C and mapping.dimension("validation") is A
    assert mapping.dimension("empowerment") is P and mapping.dimension("gratitude") is None


def test_counts_count_every_occurrence_and_ignore_unmapped() -> None:
    counts = StrategyMap.default().counts(["Question", "Question", "Others", "Information", "Juggling"])
    assert counts == {C: 2, A: 0, P: 1}
    with pytest.raises(UnknownStrategyError):
        StrategyMap.default().counts(["Juggling"], strict=True)


def test_user_mapping_from_mapping_and_file(tmp_path: Path) -> None:
    custom = StrategyMap.from_mapping({"Question": "affective", "Others": None})
    assert custom.dimension("question") is A
    assert not custom.knows("Information")
    path = tmp_path / "map.json"
    path.write_text(StrategyMap.default().to_json())
    assert StrategyMap.from_file(path) == StrategyMap.default()
    yaml_path = tmp_path / "map.yaml"
    yaml_path.write_text("dimensions:\n  Hug: affective\naliases:\n  Cuddle: Hug\n")
    pytest.importorskip("yaml")
    assert StrategyMap.from_file(yaml_path).dimension("cuddle") is A


def test_invalid_user_mappings_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="empathic"):
        StrategyMap.from_mapping({"Question": "empathic"})
    with pytest.raises(ConfigError, match="alias 'Ask' names 'Query'"):
        StrategyMap.from_mapping({"dimensions": {"Question": "cognitive"}, "aliases": {"Ask": "Query"}})
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match=r"bad\.json"):
        StrategyMap.from_file(bad)
