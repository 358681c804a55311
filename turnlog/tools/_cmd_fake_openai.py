"""``turnlog fake-openai``: serve a scripted OpenAI-compatible API on a loopback port."""

from __future__ import annotations

import argparse

from turnlog.testing._fake_openai import FakeOpenAIServer, ScriptError, load_script

from ._command import Command, UserError, add_loopback_arguments, serve_loopback

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--script", required=True, help="script file (JSON list or JSONL; see docs/providers.md)"
    )
    add_loopback_arguments(
        parser, api_key_help="require this Bearer key (others get the real API's 401 answer)"
    )


def _run(args: argparse.Namespace) -> int:
    try:
        entries = load_script(args.script)
        server = FakeOpenAIServer(
            entries, host=args.host, port=args.port, api_key=args.api_key, record_path=args.record
        )
    except (ScriptError, ValueError) as exc:
        raise UserError(str(exc)) from exc
    return serve_loopback(server, args)


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
