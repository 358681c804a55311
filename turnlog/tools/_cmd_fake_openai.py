"""``turnlog fake-openai``: serve a scripted OpenAI-compatible API on a loopback port."""

from __future__ import annotations

import argparse
import asyncio
import sys

from ._command import Command, UserError
from ._fake_openai import FakeOpenAIServer, ScriptError, load_script

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--script", required=True, help="script file (JSON list or JSONL; see docs/providers.md)"
    )
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one (default)")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--api-key", default=None, help="require this Bearer key (others get the real API's 401 answer)"
    )
    parser.add_argument("--record", default=None, help="append every received request to this JSONL file")


async def _serve(server: FakeOpenAIServer) -> None:
    await server.start()
    # The first line of output is the contract with whoever started us: the base URL.
    print(f"fake-openai listening on {server.base_url}", flush=True)
    await server.serve_forever()


def _run(args: argparse.Namespace) -> int:
    try:
        entries = load_script(args.script)
        server = FakeOpenAIServer(
            entries, host=args.host, port=args.port, api_key=args.api_key, record_path=args.record
        )
    except (ScriptError, ValueError) as exc:
        raise UserError(str(exc)) from exc
    try:
        asyncio.run(_serve(server))
    except OSError as exc:
        print(
            f"turnlog fake-openai: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr
        )
        return 1
    return 0


COMMAND = Command(
    name="fake-openai",
    help="serve a scripted OpenAI-compatible Chat Completions API on 127.0.0.1",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog fake-openai --script replies.jsonl --port 0",
    description=(
        "Serve a scripted OpenAI-compatible Chat Completions API on a loopback port.\n"
        "Prints 'fake-openai listening on http://127.0.0.1:PORT/v1' and serves until interrupted.\n"
        "Received requests are listed at GET /_fake/requests (credentials reduced to a digest)."
    ),
)
