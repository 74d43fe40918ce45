"""The ``care`` command line.

Examples:
    $ care score examples/dialogues.jsonl --backend default --out scores.jsonl
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from care_sdk import __version__
from care_sdk.errors import CareError, InputError

__all__ = ["build_parser", "main"]

COMMANDS_GROUP = "care_sdk.commands"
"""The entry-point group through which other packages add ``care`` commands: each entry is named for
the command it adds and is a function ``add(subparsers)`` (care-lab's ``care train|bench|eval|plot``
come this way). ``care COMMAND`` loads only that command's entry, so ``care score`` imports no other
package; ``care --help`` loads them all to list them."""

SDK_COMMANDS = ("score", "report", "serve")
"""The commands the SDK itself owns."""


def _print_record(record: dict[str, Any]) -> None:
    head = f"{record['id']} turn {record['turn']}"
    if record["reward"] is None:
        print(f"{head}  FAILED: {record['error']}")
        return
    flags = f"  flags: {', '.join(record['flags'])}" if record.get("flags") else ""
    rubric = record.get("rubric")
    if rubric is None or record.get("evaluation") is None:
        print(f"{head}  reward {record['reward']:.3f}{flags}  ({record.get('note') or 'no evaluation'})")
        return
    weights = "  ".join(f"{d} {w:.2f}" for d, w in rubric["weights"].items())
    reward = f"reward {record['reward']:.3f}"
    fit = record.get("context_fit")
    if fit is not None and record.get("dimension_scores"):
        rubric_part = sum(rubric["weights"][d] * s for d, s in record["dimension_scores"].items())
        reward += f" = fit {fit:.2f} x (0.5 + 0.5 x rubric {rubric_part:.3f})"
    print(f"{head}  {reward}  weights: {weights}{flags}")
    for score in record["evaluation"]["scores"]:
        print(f"    [{score['score']:.1f}] {score['dimension']:<9}  {score['criterion']}")
    for repair in rubric.get("repairs", ()):
        by = {"retry": "by a retry's criterion", "fixed": "by the fixed criterion"}.get(repair["source"], "dropped")
        print(f"    replaced ({repair['defect']}, {by}): {repair['original']}")


def _cmd_score(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from care_sdk.cli_options import reward_recipe
    from care_sdk.dialogues import read_dialogues
    from care_sdk.reward import AdaptiveReward
    from care_sdk.score_files import score_file

    try:
        total = sum(len(list(x.dialogue.turns())) for x in read_dialogues(args.input) if x.dialogue is not None)
    except OSError as exc:
        print(f"care score: cannot read {args.input}: {exc.strerror}", file=sys.stderr)
        return 2
    recipe = reward_recipe(args)
    reward = AdaptiveReward.from_backend(**recipe) if args.ray is None else None  # on Ray, each actor builds its own
    show = args.show if args.show is not None else args.out is None
    bar = tqdm(total=total, desc="scoring turns", unit="turn", file=sys.stderr, disable=args.quiet)

    def input_error(error: InputError) -> None:
        bar.write(f"care score: skipped {error}", file=sys.stderr)

    collected: list[dict[str, Any]] = []  # the report's records when there is no --out file

    def on_record(record: dict[str, Any]) -> None:
        if args.report:
            collected.append(record)
        if show:
            _print_record(record)

    try:
        if reward is not None:
            summary = score_file(
                args.input,
                reward,
                out=args.out,
                batch_size=args.batch_size,
                on_input_error=input_error,
                on_record=on_record,
                progress=bar.update,
            )
        else:
            from care_sdk import ray_scoring

            summary = ray_scoring.score_file(
                args.input,
                args.out,
                reward=recipe,
                address=None if args.ray == "local" else args.ray,
                workers=args.ray_workers,
                batch_size=args.batch_size,
                on_input_error=input_error,
                on_record=on_record,
                progress=bar.update,
            )
    finally:
        bar.close()
    print(summary.table())
    if args.report:
        from care_sdk.report import write_report
        from care_sdk.report.cli import print_report_summary

        report = write_report(args.out or collected, args.report, dialogues=args.input)
        print_report_summary(report, prog="care score", issues=False)  # input issues were reported above
    return 0 if summary.ok else 1


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of the ``care`` command.

    Args:
        command: the command about to run, when known: only its own entry point (if it is not one
            of :data:`SDK_COMMANDS`) is loaded. ``None`` loads every installed command.

    Examples:
        >>> build_parser().parse_args(["score", "in.jsonl"]).backend
        'default'
    """
    from care_sdk.cli_options import add_reward_options

    parser = argparse.ArgumentParser(
        prog="care", description="CARE: turn-adaptive rubric rewards for empathetic dialogue."
    )
    parser.add_argument("--version", action="version", version=f"care-sdk {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    score = sub.add_parser("score", help="score every assistant turn of a JSONL dialogue file")
    score.add_argument(
        "input", help='JSONL, one {"id": ..., "messages": [...]} per line, with an optional "profile" (the user\'s)'
    )
    score.add_argument("--out", help="output JSONL, one record per assistant turn; an existing file is resumed")
    add_reward_options(score)
    score.add_argument("--batch-size", type=int, default=8, help="turns per backend batch (default: %(default)s)")
    score.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="score on a Ray cluster with Ray Data (needs care-sdk[ray]): 'auto' (the cluster this machine "
        "belongs to), 'local' (start one here) or the cluster's address",
    )
    score.add_argument(
        "--ray-workers",
        type=int,
        default=2,
        help="with --ray: actors, one CPU and one model each (default: %(default)s)",
    )
    score.add_argument(
        "--show",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="print each turn's weights, criteria and reward (default: on without --out)",
    )
    score.add_argument("--quiet", action="store_true", help="no progress bar")
    score.add_argument("--report", metavar="HTML", help="also write a self-contained HTML report (see care report)")
    score.set_defaults(func=_cmd_score)

    from care_sdk.report.cli import add_report_commands
    from care_sdk.serve.cli import add_serve_commands

    add_report_commands(sub)
    add_serve_commands(sub)
    for entry in _command_entries(command):
        entry.load()(sub)
    return parser


def _command_entries(command: str | None) -> list[EntryPoint]:
    """The installed command entries to load for ``command``: none for an SDK command, only its own
    for an installed one, all of them otherwise (``--help``, or an unknown command to list)."""
    entries = sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name)
    if command in SDK_COMMANDS:
        return []
    own = [e for e in entries if e.name == command]
    return own or entries


def _command_of(argv: Sequence[str]) -> str | None:
    """The command word of ``argv``: its first argument that is not an option (the ``care`` parser
    itself takes only ``--help`` and ``--version``)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``care`` command; returns the exit status (0 ok, 1 some items failed, 2 usage error).

    Examples:
        >>> main(["score", "/nonexistent/dialogues.jsonl", "--backend", "default"])  # doctest: +SKIP
        2
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except CareError as exc:
        print(f"care {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"care {args.command}: interrupted; finished records are kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
