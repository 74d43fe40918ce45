"""``care serve``: run the reward service.

Examples:
    $ care serve --backend default --port 8000
    $ CARE_TOKEN=secret care serve --backend openai:gpt-4o-mini --token-env CARE_TOKEN
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

__all__ = ["add_serve_commands"]


def _cmd_serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from care_sdk.cli_options import reward_recipe
    from care_sdk.reward import AdaptiveReward
    from care_sdk.serve.app import ServeConfig, serve

    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            print(f"care serve: --token-env names {args.token_env}, which is not set or empty", file=sys.stderr)
            return 2
    try:
        config = ServeConfig(
            batch_window_ms=args.batch_window_ms,
            max_batch=args.max_batch,
            max_queue=args.max_queue,
            max_body_bytes=args.max_body_bytes,
            token=token,
        )
    except ValidationError as exc:
        where = ".".join(str(x) for x in exc.errors()[0]["loc"])
        print(f"care serve: --{where.replace('_', '-')}: {exc.errors()[0]['msg']}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    reward = AdaptiveReward.from_backend(**reward_recipe(args))
    serve(reward, config, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def add_serve_commands(sub: Any) -> None:
    """Add ``care serve`` to the ``care`` command's subparsers.

    Examples:
        >>> from care_sdk.cli import build_parser
        >>> build_parser().parse_args(["serve", "--port", "9000"]).port
        9000
    """
    from care_sdk.cli_options import add_reward_options

    p = sub.add_parser("serve", help="run the reward service (OpenRLHF /get_reward, /v1/score, /metrics)")
    add_reward_options(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default: %(default)s)")
    p.add_argument(
        "--token-env", metavar="VAR", help="require 'Authorization: Bearer <token>' with the token read from VAR"
    )
    p.add_argument(
        "--batch-window-ms",
        type=float,
        default=10.0,
        help="wait this long after a batch's first item for more to arrive (default: %(default)s)",
    )
    p.add_argument("--max-batch", type=int, default=64, help="most items per scoring call (default: %(default)s)")
    p.add_argument(
        "--max-queue", type=int, default=256, help="most items accepted and unanswered; then 429 (default: %(default)s)"
    )
    p.add_argument(
        "--max-body-bytes", type=int, default=1_000_000, help="largest request body; then 413 (default: %(default)s)"
    )
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=_cmd_serve)
