"""Dataset loaders and the strategy → dimension mapping.

API summary (stable):

- Every loader returns ``Loaded[T]``: a sequence of typed records (``.records``) plus
  ``.issues``, a list of :class:`LoadIssue` (``path``, ``position`` = ``"line N"`` or ``"[i]"``,
  ``field``, ``message``, ``dropped``). ``strict=True`` raises
  :class:`~care_sdk.errors.InputError` at the first issue instead. Nothing is skipped silently.
- ``load_esconv(path, splits=None, strategy_map=None, strict=False) -> Loaded[SupportDialogue]``:
  a ``.jsonl`` re-release split, an original-layout ``ESConv.json`` / ``FailedESConv.json``, or a
  directory (all three JSONL splits by default).
- ``load_mint_conversations(path)`` (``training/conversations_322.json``, unlabelled),
  ``load_lend_an_ear(root)`` (50 conversations, supporter turns tagged with MINT tactics),
  ``load_judged_turns(path) -> Loaded[JudgedResponse]`` (12 systems' replies to the same turns,
  judge scores).
- ``load_sage_profiles(path) -> Loaded[SageProfile]``,
  ``load_sage_rollouts(path) -> Loaded[SageRollout]`` (Chinese; turn-level emotion deltas, the
  test turns' withheld without a test-read entry).
- :class:`SupportDialogue`: ``id``, ``source``, ``messages`` (OpenAI messages, user = seeker,
  assistant = supporter, consecutive utterances merged), ``strategies`` (per message, ``None``
  when unlabelled), ``metadata``; ``.to_dialogue()`` and ``.supporter_turns(strategy_map)``.
- :class:`SupportTurn`: ``context``, ``reply``, ``strategies``, ``counts`` (n_d per dimension),
  ``top_dimensions``.
- :class:`StrategyMap`: ``StrategyMap.default()`` (ESConv strategies + MINT tactics, package
  data ``strategy_map.json``), ``from_mapping`` / ``from_file`` for your own;
  ``.dimension(name)``, ``.canonical(name)``, ``.counts(strategies)``.
- :func:`~care_lab.data.splits.lend_an_ear_split`: the one split by conversation of Lend-an-Ear
  (train on ``train`` only; ``valid`` and ``test`` are held out everywhere, both data role
  ``selection``: :func:`lend_an_ear_role`).
- The fresh ``test`` sets, whose loaders ask for the entry of a read in the test-read ledger
  (``test_read=``, :mod:`care_lab.data.results`): ``load_intent_turns`` / ``load_intent_annotations``
  (EmpatheticIntents listener turns, intent and mapped dimension, :func:`intent_map`) and
  ``sage_test_turns`` (SAGE turns outside the 400 already scored; ``sage_turns`` and
  ``load_sage_turns`` give the selection turns, and every turn with its role given the entry).
- Data roles (:mod:`care_lab.data.roles`, decided by a file's content): :func:`data_role`,
  :func:`require_role` (every reader that fits, selects or evaluates: ``fit`` reads train only,
  ``select`` train or selection, test only through the test-read ledger),
  :func:`require_trainable`, :func:`require_held_out` and :func:`write_roles`; results files and
  the ledger (:mod:`care_lab.data.results`): :func:`write_results`, :func:`record_test_read`.
- What the labels say about priority (:mod:`care_lab.data.priorities`: r_align's rule, the
  turn-position prior) and the MINT judge's preference pairs (:mod:`care_lab.data.judged_pairs`),
  used by training and the benchmarks alike.
- :func:`data_dir` locates the data directory (an explicit path, else ``$CARE_DATA_DIR``; an
  error that says where to get the data otherwise); :func:`require_data` checks one file.

Examples:
    >>> from care_lab.data import StrategyMap
    >>> StrategyMap.default().dimension("Restatement or Paraphrasing").value
    'cognitive'
"""

from __future__ import annotations

from care_lab.data._issues import Loaded, LoadIssue
from care_lab.data.esconv import ESCONV_SPLITS, load_esconv
from care_lab.data.intents import IntentTurn, ManualIntent, intent_map, load_intent_annotations, load_intent_turns
from care_lab.data.locations import DATA_DIR_ENV, DATASETS, data_dir, require_data
from care_lab.data.mint import (
    MINT_JUDGE_DIMENSIONS,
    MINT_TACTICS,
    JudgedResponse,
    load_judged_turns,
    load_lend_an_ear,
    load_mint_conversations,
)
from care_lab.data.records import SupportDialogue, SupportTurn
from care_lab.data.results import record_test_read, write_results
from care_lab.data.roles import data_role, require_held_out, require_role, require_trainable, write_roles
from care_lab.data.sage import SageProfile, SageRollout, load_sage_profiles, load_sage_rollouts
from care_lab.data.sage_turns import (
    SageTurn,
    load_sage_turns,
    sage_rollout_files,
    sage_scored_keys,
    sage_test_turns,
    sage_turns,
)
from care_lab.data.splits import LEND_AN_EAR_HELD_OUT, lend_an_ear_role, lend_an_ear_split, split_of
from care_lab.data.strategies import StrategyMap, UnknownStrategyError, default_strategy_map

__all__ = [
    "DATASETS",
    "DATA_DIR_ENV",
    "ESCONV_SPLITS",
    "LEND_AN_EAR_HELD_OUT",
    "MINT_JUDGE_DIMENSIONS",
    "MINT_TACTICS",
    "IntentTurn",
    "JudgedResponse",
    "LoadIssue",
    "Loaded",
    "ManualIntent",
    "SageProfile",
    "SageRollout",
    "SageTurn",
    "StrategyMap",
    "SupportDialogue",
    "SupportTurn",
    "UnknownStrategyError",
    "data_dir",
    "data_role",
    "default_strategy_map",
    "intent_map",
    "lend_an_ear_role",
    "lend_an_ear_split",
    "load_esconv",
    "load_intent_annotations",
    "load_intent_turns",
    "load_judged_turns",
    "load_lend_an_ear",
    "load_mint_conversations",
    "load_sage_profiles",
    "load_sage_rollouts",
    "load_sage_turns",
    "record_test_read",
    "require_data",
    "require_held_out",
    "require_role",
    "require_trainable",
    "sage_rollout_files",
    "sage_scored_keys",
    "sage_test_turns",
    "sage_turns",
    "split_of",
    "write_results",
    "write_roles",
]
