"""``turnlog fake-upstream``: serve scripted Anthropic, OpenAI Responses and Gemini APIs on loopback."""

from __future__ import annotations

import argparse
import asyncio
import sys

from ._command import Command, UserError
from ._fake_upstream import FakeUpstreamServer
from ._fake_upstream_script import ScriptError, load_upstream_script

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--script",
        default=None,
        help="script file (JSON list or JSONL; see docs/providers.md); default: empty",
    )
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one (default)")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--api-key", default=None, help="require this key (others get each API's own bad-key answer)"
    )
    parser.add_argument("--record", default=None, help="append every received request to this JSONL file")
    parser.add_argument(
        "--verbose", action="store_true", help="print one line per request on stderr (method, path, status)"
    )


async def _serve(server: FakeUpstreamServer) -> None:
    await server.start()
    # The first line of output is the contract with whoever started us: the base URL.
    print(f"fake-upstream listening on {server.base_url}", flush=True)
    await server.serve_forever()


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
    try:
        asyncio.run(_serve(server))
    except OSError as exc:
        print(
            f"turnlog fake-upstream: cannot listen on {args.host}:{args.port}: {exc.strerror}",
            file=sys.stderr,
        )
        return 1
    return 0


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
