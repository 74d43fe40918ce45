"""``care eval``: the method's evaluation protocol (held-out generator win rate, simulated users, EQ-Bench 3).

Importing this module is light; models and data loaders are imported when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from care_lab.bench._cli_args import ProgressBar, csv_list, slug
from care_sdk.backends import BackendPool
from care_sdk.errors import ConfigError
from care_sdk.variants import VARIANTS

__all__ = ["add_eval_commands", "parse_generator"]


def parse_generator(value: str) -> tuple[str, str]:
    """A ``--generator`` value, ``LABEL=SPEC`` or a bare ``SPEC`` (labelled by itself), as ``(label, spec)``.

    Examples:
        >>> parse_generator("sft=hf:runs/sft/merged"), parse_generator("default")
        (('sft', 'hf:runs/sft/merged'), ('default', 'default'))
    """
    label, sep, spec = value.partition("=")
    if not sep:
        return value.strip(), value.strip()
    if not label.strip() or not spec.strip():
        raise argparse.ArgumentTypeError(f"expected LABEL=SPEC or SPEC, got {value!r}")
    return label.strip(), spec.strip()


def _llama_options(spec: str, n_ctx: int | None) -> dict[str, Any] | None:
    """``n_ctx`` for a llama.cpp spec (EQ-Bench 3's prompts are long); other backends take no such option.

    Examples:
        >>> _llama_options("base", 8192), _llama_options("openai:m@http://127.0.0.1:8000/v1", 8192)
        ({'n_ctx': 8192}, None)
    """
    llama = spec.partition(":")[0].strip().lower() in ("default", "base", "llamacpp")
    return {"n_ctx": n_ctx} if n_ctx and llama else None


def _add_run_options(cmd: Any, *, out: str, batch_size: int, batch: str) -> None:
    """The options every ``care eval`` command shares: output, data, batching, seeds, progress."""
    cmd.add_argument("--out", help=f"output directory (default: {out}); resumed if present")
    cmd.add_argument("--data-dir", help="the data directory (default: $CARE_DATA_DIR)")
    cmd.add_argument("--batch-size", type=int, default=batch_size, help=f"{batch} (default: %(default)s)")
    cmd.add_argument("--seed", type=int, default=0, help="sampling and bootstrap seed (default: %(default)s)")
    cmd.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default: %(default)s)")
    cmd.add_argument("--quiet", action="store_true", help="no progress bar")


def _cmd_generator(args: argparse.Namespace) -> int:
    from care_lab.evals.pairs import lend_an_ear_held_out_pairs, read_pairs_file
    from care_lab.evals.winrate import WinRateRunner
    from care_sdk import RubricEvaluator, RubricGenerator

    bad = [v for v in args.variants if v not in VARIANTS]
    if bad:
        raise ConfigError(f"unknown variant {', '.join(bad)}; choose from {', '.join(VARIANTS)}")
    generators = args.generator or [("default", "default")]
    labels = [label for label, _ in generators]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--generator labels must be unique, got {', '.join(labels)}")
    if args.pairs:
        held = read_pairs_file(args.pairs, limit=args.limit)
    else:
        from care_lab.data import data_dir

        root = Path(args.lend_an_ear) if args.lend_an_ear else data_dir(args.data_dir) / "mint_lend_an_ear"
        held = lend_an_ear_held_out_pairs(
            root,
            margin=args.margin,
            max_pairs_per_turn=args.max_pairs_per_turn,
            reject_human=args.reject_human,
            limit=args.limit,
        )
    if not held.pairs:
        raise ConfigError(f"no pairs to evaluate ({held.description})")
    print(
        f"care eval generator: {len(held.pairs)} pairs over {held.contexts} contexts "
        f"(of {held.available} available): {held.description}",
        file=sys.stderr,
    )
    with BackendPool() as backends:
        evaluator = RubricEvaluator(
            backends.get(args.evaluator, role="evaluator"), seed=args.seed, max_tokens=args.evaluator_max_tokens or 160
        )
        rubric_generators = {
            label: RubricGenerator(
                backends.get(spec, role="generator"), seed=args.seed, max_tokens=args.generator_max_tokens or 512
            )
            for label, spec in generators
        }
        out = Path(args.out) if args.out else Path("care-eval-generator") / slug(args.evaluator)
        runner = WinRateRunner(
            rubric_generators,
            evaluator,
            out_dir=out,
            variants=args.variants,
            batch_size=args.batch_size,
            resamples=args.resamples,
            seed=args.seed,
        )
        with ProgressBar("scoring pairs", "pair", quiet=args.quiet) as bar:
            report = runner.run(held, on_start=bar.start, progress=bar.update)
    print(report.markdown())
    print(
        f"\ncare eval generator: {report.scored} pairs scored, {report.reused} reused; reports in {out}",
        file=sys.stderr,
    )
    missing = sum(r.missing for r in report.results)
    if missing:
        print(
            f"care eval generator: {missing} row results missing (errors are in {out / 'records.jsonl'})",
            file=sys.stderr,
        )
        return 1
    return 0


def _add_generator_command(sub: Any) -> None:
    cmd = sub.add_parser(
        "generator",
        help="held-out preference win rate of rubric generators, with the ablations side by side",
        description=(
            "For each held-out pair (context, chosen, rejected), each generator writes a rubric for the context "
            "and the evaluator scores both replies under it; a win is the chosen reply scoring higher (a tie "
            "counts 1/2). Rows: each generator as written, with uniform weights and with fixed criteria, and "
            "the fixed rubric. Without --pairs, the pairs are Lend-an-Ear's held-out conversations (never "
            "trained on by build-data). Writes records.jsonl, winrate.json and winrate.md to --out; a re-run "
            "with the same --out reuses finished pairs."
        ),
    )
    cmd.add_argument(
        "--generator",
        action="append",
        type=parse_generator,
        metavar="LABEL=SPEC",
        help="a generator to compare (repeatable, in table order; e.g. base=base, shipped=default, "
        "sft=hf:runs/sft/merged); default: default",
    )
    cmd.add_argument("--evaluator", default="default", help="the evaluator's backend spec (default: %(default)s)")
    cmd.add_argument(
        "--pairs",
        help="a held-out pairs JSONL (e.g. build-data's pairs/test.jsonl; its roles.json must not say train); "
        "default: Lend-an-Ear's held-out pairs",
    )
    cmd.add_argument(
        "--variants",
        type=csv_list,
        default=VARIANTS,
        help=f"comma-separated subset of {','.join(VARIANTS)} (default: all)",
    )
    cmd.add_argument("--limit", type=int, help="evaluate the pairs of the first N contexts only")
    cmd.add_argument("--margin", type=float, default=1.0, help="Lend-an-Ear: judge-score gap of a pair (default: 1.0)")
    cmd.add_argument("--max-pairs-per-turn", type=int, default=2, help="Lend-an-Ear: pairs per turn (default: 2)")
    cmd.add_argument("--reject-human", action="store_true", help="Lend-an-Ear: the human reply may be the rejected one")
    cmd.add_argument("--lend-an-ear", help="the mint_lend_an_ear directory (default: under --data-dir)")
    cmd.add_argument("--generator-max-tokens", type=int, help="token budget of one rubric (default: 512)")
    cmd.add_argument("--evaluator-max-tokens", type=int, help="token budget of one evaluation (default: 160)")
    _add_run_options(cmd, out="care-eval-generator/<evaluator>", batch_size=4, batch="pairs per backend batch")
    cmd.set_defaults(func=_cmd_generator)


def _cmd_sim_user(args: argparse.Namespace) -> int:
    from care_lab.data import data_dir
    from care_lab.evals.simuser import EmotionSimulator
    from care_lab.evals.simuser_run import SimUserRunner
    from care_lab.simulation import DEFAULT_SYSTEM_PROMPT, BackendPolicy, DialogueJudge, UserSettings, load_profiles
    from care_lab.simulation.adversarial import check_user_types, with_user_types
    from care_lab.simulation.consistency import StateReader

    if args.simulator == args.policy:
        raise ConfigError("--simulator must be another model than --policy (the policy would play its own user)")
    reader_spec = None if args.no_reader else args.reader or args.simulator
    if reader_spec == args.policy:
        raise ConfigError("--reader must be another model than --policy (the policy would read its own replies)")
    try:
        check_user_types(args.user_types)
    except ValueError as exc:
        raise ConfigError(f"--user-types: {exc}") from exc
    users = UserSettings(source=args.source, held_out_path=args.profiles, max_profiles=args.limit)
    # refuses a file declared train; every profile is played once per user type (scenario-matched)
    profiles = with_user_types(load_profiles(users, "held_out", args.data_dir), args.user_types)
    default = data_dir(args.data_dir) / "sage_rlver" / "profiles" / "simulator_profile_withfirsttalk.jsonl"
    source = Path(args.profiles) if args.profiles else default if args.source == "sage" else None
    with BackendPool() as backends:
        policy = BackendPolicy(backends.get(args.policy), max_tokens=args.policy_max_tokens, seed=args.seed)
        simulator = EmotionSimulator(backends.get(args.simulator), max_tokens=args.simulator_max_tokens, seed=args.seed)
        judge = DialogueJudge(backends.get(args.judge), max_tokens=args.judge_max_tokens) if args.judge else None
        reader = (
            StateReader(backends.get(reader_spec), max_tokens=args.reader_max_tokens, seed=args.seed)
            if reader_spec
            else None
        )
        out = Path(args.out) if args.out else Path("care-eval-sim-user") / slug(args.policy)
        runner = SimUserRunner(
            policy,
            simulator,
            judge=judge,
            reader=reader,
            out_dir=out,
            max_turns=args.max_turns,
            initial_emotion=args.initial_emotion,
            success=args.success,
            failure=args.failure,
            system_prompt=DEFAULT_SYSTEM_PROMPT,
            batch_size=args.batch_size,
            resamples=args.resamples,
            seed=args.seed,
            sources=[source] if source else [],
        )
        with ProgressBar("episodes", "episode", quiet=args.quiet) as bar:
            report = runner.run(profiles, on_start=bar.start, progress=bar.update)
    print(report.markdown())
    print(
        f"\ncare eval sim-user: {report.scored} episodes run, {report.reused} reused; reports in {out}", file=sys.stderr
    )
    return 1 if report.counts.get("error") or report.counts.get("unjudged") or report.counts.get("unread") else 0


def _add_sim_user_command(sub: Any) -> None:
    cmd = sub.add_parser(
        "sim-user",
        help="a policy against SAGE-style simulated users whose emotion (0-100) moves each turn",
        description=(
            "Each held-out profile (default: the SAGE/RLVER profiles, eval-only) plays a user who, after every "
            "policy reply, says why its feelings changed, gives its emotion (0-100) and answers. Reports the "
            "success rate (final emotion >= --success), failure rate (<= --failure) and mean final emotion with "
            "bootstrap intervals, and an optional independent judge's mean score. --user-types plays every profile "
            "as each type (cooperative, or the adversarial types: gaslighting, escalation, validation, "
            "hidden_intention); a state reader (--reader) reads each policy reply alone for the state it "
            "acknowledges, giving the consistency score (tracking the user's emotion) beside the emotion change "
            "(improving it), per type. Writes records.jsonl, simuser.json and simuser.md to --out; a re-run with "
            "the same --out reuses finished episodes."
        ),
    )
    cmd.add_argument("--policy", required=True, help="the policy's backend spec")
    cmd.add_argument("--simulator", default="base", help="the simulated user's backend spec (default: %(default)s)")
    cmd.add_argument("--judge", help="an independent judge's backend spec (default: no judge)")
    cmd.add_argument(
        "--user-types",
        type=csv_list,
        default=["cooperative"],
        help="comma-separated simulated-user types, each played on every profile: cooperative, gaslighting, "
        "escalation, validation, hidden_intention (default: cooperative)",
    )
    cmd.add_argument("--reader", help="the state reader's backend spec (default: the simulator's)")
    cmd.add_argument("--no-reader", action="store_true", help="no state reader (no consistency score)")
    cmd.add_argument("--reader-max-tokens", type=int, default=48, help="token budget of a reading")
    cmd.add_argument("--source", choices=["sage", "esconv"], default="sage", help="profile source (default: sage)")
    cmd.add_argument("--profiles", help="a held-out profiles file (default: the SAGE profiles under --data-dir)")
    cmd.add_argument("--limit", type=int, help="the first N profiles only")
    cmd.add_argument("--max-turns", type=int, default=5, help="policy turns per episode (default: %(default)s)")
    cmd.add_argument("--initial-emotion", type=int, default=30, help="the users' starting emotion (default: 30)")
    cmd.add_argument("--success", type=int, default=80, help="success: final emotion >= this (default: 80)")
    cmd.add_argument("--failure", type=int, default=10, help="failure: final emotion <= this (default: 10)")
    cmd.add_argument("--policy-max-tokens", type=int, default=128, help="token budget of a policy turn")
    cmd.add_argument("--simulator-max-tokens", type=int, default=192, help="token budget of a simulated turn")
    cmd.add_argument("--judge-max-tokens", type=int, default=160, help="token budget of a verdict")
    _add_run_options(cmd, out="care-eval-sim-user/<policy>", batch_size=8, batch="episodes rolled out together")
    cmd.set_defaults(func=_cmd_sim_user)


def _cmd_eqbench3(args: argparse.Namespace) -> int:
    from care_lab.data import data_dir
    from care_lab.evals.eqbench3 import load_eqbench3
    from care_lab.evals.eqbench3_run import EqBench3Runner

    policies = args.policy
    labels = [label for label, _ in policies]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--policy labels must be unique, got {', '.join(labels)}")
    root = Path(args.eqbench3) if args.eqbench3 else data_dir(args.data_dir) / "eqbench3"
    data = load_eqbench3(root)
    scenarios = data.select(args.scenarios, args.limit)
    if any(spec == args.judge for _, spec in policies):
        print("care eval eqbench3: warning: the judge is also one of the policies", file=sys.stderr)
    with BackendPool() as backends:
        out = Path(args.out) if args.out else Path("care-eval-eqbench3") / slug(args.judge)
        runner = EqBench3Runner(
            {label: backends.get(spec, _llama_options(spec, args.n_ctx)) for label, spec in policies},
            backends.get(args.judge, _llama_options(args.judge, args.n_ctx)),
            data,
            out_dir=out,
            iterations=args.iterations,
            max_tokens=args.max_tokens,
            judge_max_tokens=args.judge_max_tokens,
            max_reasoning_chars=args.max_reasoning_chars,
            pairwise=not args.no_pairwise,
            batch_size=args.batch_size,
            resamples=args.resamples,
            seed=args.seed,
        )
        with ProgressBar("eqbench3", "step", quiet=args.quiet) as bar:
            report = runner.run(scenarios, on_start=bar.start, progress=bar.update)
    print(report.markdown())
    print(f"\ncare eval eqbench3: reports in {out}", file=sys.stderr)
    failed = sum(c["error"] + c["rubric_error"] for c in report.counts.values())
    if failed:
        print(f"care eval eqbench3: {failed} transcripts or verdicts failed (see {out})", file=sys.stderr)
    return 1 if failed else 0


def _add_eqbench3_command(sub: Any) -> None:
    cmd = sub.add_parser(
        "eqbench3",
        help="policies through the EQ-Bench 3 scenarios, judged with the benchmark's rubric and pairwise prompts",
        description=(
            "Runs each policy through the EQ-Bench 3 role-play, message-drafting and analysis scenarios (the "
            "benchmark's respondent templates and debrief), then a judge scores each transcript with the "
            "benchmark's rubric (0-20 per criterion; the rubric score is the mean of the 'higher is better' "
            "criteria x 5) and, with two or more policies, compares every two on every scenario in both orders "
            "with the benchmark's pairwise prompt. Writes transcripts.jsonl, pairwise.jsonl, eqbench3.json and "
            "eqbench3.md to --out; a re-run with the same --out does only what is missing or failed."
        ),
    )
    cmd.add_argument(
        "--policy",
        action="append",
        required=True,
        type=parse_generator,
        metavar="LABEL=SPEC",
        help="a policy to run (repeatable; e.g. base=base, trained=hf:runs/policy/merged)",
    )
    cmd.add_argument("--judge", default="base", help="the judge's backend spec (default: %(default)s)")
    cmd.add_argument("--scenarios", type=csv_list, help="comma-separated scenario ids (default: all)")
    cmd.add_argument("--limit", type=int, help="the first N scenarios (of --scenarios, or of all)")
    cmd.add_argument("--iterations", type=int, default=1, help="runs of each scenario (default: %(default)s)")
    cmd.add_argument("--max-tokens", type=int, default=2048, help="a respondent turn's token budget (default: 2048)")
    cmd.add_argument("--judge-max-tokens", type=int, default=1024, help="a verdict's token budget (default: 1024)")
    cmd.add_argument(
        "--max-reasoning-chars", type=int, default=2000, help="the judge's reasoning bound (default: 2000)"
    )
    cmd.add_argument("--no-pairwise", action="store_true", help="rubric scores only")
    cmd.add_argument("--n-ctx", type=int, default=8192, help="llama.cpp context window (default: %(default)s)")
    cmd.add_argument("--eqbench3", help="the eqbench3 data directory (default: under --data-dir)")
    _add_run_options(cmd, out="care-eval-eqbench3/<judge>", batch_size=4, batch="scenarios or verdicts per batch")
    cmd.set_defaults(func=_cmd_eqbench3)


def add_eval_commands(subparsers: Any) -> None:
    """Register ``care eval`` and its commands on the ``care`` command's subparsers.

    Examples:
        >>> parser = argparse.ArgumentParser()
        >>> add_eval_commands(parser.add_subparsers(dest="command"))
        >>> args = parser.parse_args(["eval", "generator", "--generator", "base=base", "--generator", "default"])
        >>> args.generator, args.evaluator
        ([('base', 'base'), ('default', 'default')], 'default')
    """
    group = subparsers.add_parser("eval", help="the method's evaluation protocol, judged apart from the reward")
    sub = group.add_subparsers(dest="eval_command", required=True, metavar="EVAL")
    _add_generator_command(sub)
    _add_sim_user_command(sub)
    _add_eqbench3_command(sub)
