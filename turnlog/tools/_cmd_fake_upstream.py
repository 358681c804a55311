"""``turnlog fake-upstream``: serve scripted Anthropic, OpenAI Responses and Gemini APIs on loopback."""

from __future__ import annotations

import argparse
import sys

from turnlog.testing._fake_upstream import FakeUpstreamServer
from turnlog.testing._fake_upstream_script import ScriptError, load_upstream_script

from ._command import Command, UserError, add_loopback_arguments, serve_loopback

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--script",
        default=None,
        help="script file (JSON list or JSONL; see docs/providers.md); default: empty",
    )
    add_loopback_arguments(parser, api_key_help="require this key (others get each API's own bad-key answer)")
    parser.add_argument(
        "--verbose", action="store_true", help="print one line per request on stderr (method, path, status)"
    )


def _run(args: argparse.Namespace) -> int:
    try:
        entries = load_upstream_script(args.script) if args.script else []
        server = FakeUpstreamServer(
            entries,
            host=args.host,
            port=args.port,
            api_key=args.api_key,
            record_path=args.record,
            log=sys.stderr if args.verbose else None,
        )
    except (ScriptError, ValueError) as exc:
        raise UserError(str(exc)) from exc
    return serve_loopback(server, args)


COMMAND = Command(
    name="fake-upstream",
    help="serve scripted Anthropic, OpenAI Responses and Gemini APIs on 127.0.0.1 (for the real CLIs)",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog fake-upstream --script replies.json --port 0 --verbose",
    description=(
        "Serve the Anthropic Messages API (/v1/messages), the OpenAI Responses API (/v1/responses)\n"
        "and the Gemini API (/v1beta/models/M:streamGenerateContent) from one script on a loopback\n"
        "port. Prints 'fake-upstream listening on http://127.0.0.1:PORT' and serves until interrupted.\n"
        "Received requests are listed at GET /_fake/requests (credentials reduced to a digest);\n"
        "POST /_fake/script replaces the script."
    ),
)
