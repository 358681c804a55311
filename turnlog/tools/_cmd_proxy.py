"""``turnlog proxy``: record the LLM API calls of any agent at the wire (``docs/proxy.md``)."""

from __future__ import annotations

import argparse
import secrets
import signal
import socket
import sys
from functools import partial
from typing import TYPE_CHECKING

import anyio
import httpx

from ._command import Command, UserError, add_store_argument

if TYPE_CHECKING:
    from turnlog.kernel.wire import Api, ProxyApp

__all__ = ["COMMAND", "parse_upstreams"]

_APIS: tuple[Api, ...] = ("openai", "anthropic", "gemini", "chatgpt", "code_assist")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store_argument(parser, json_flag=False)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8788, help="port (default: 8788; 0 picks a free one)")
    parser.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="URL | API=URL",
        help="where calls go: one URL for every API, or openai=URL, anthropic=URL, gemini=URL, "
        "chatgpt=URL (Codex signed in with ChatGPT), code_assist=URL (Gemini CLI signed in with "
        "Google) (repeatable; default: the real hosts)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help="token every request must send in x-turnlog-token; required off loopback "
        "(generated and printed when not given)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long to wait for the upstream to answer, and between two parts of a stream (default: 600)",
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="answer every model call from the recorded call with the same request (offline); "
        "a request without one gets a 404 in the API's error shape",
    )
    parser.add_argument(
        "--pace",
        choices=("instant", "recorded"),
        default="instant",
        help="with --replay: send recorded stream events at once (default) or at their recorded pace",
    )
    parser.add_argument(
        "--record-missing",
        action="store_true",
        help="with --replay: send a request without a recording upstream and record it",
    )
    parser.add_argument(
        "--server",
        choices=("h11", "uvicorn"),
        default="h11",
        help="the HTTP server: turnlog's own on h11 (default, the fastest) or uvicorn (needs the ui extra)",
    )
    parser.add_argument(
        "--max-body",
        type=int,
        default=32 * 1024 * 1024,
        help="largest request body in bytes (default: 32 MiB)",
    )


def parse_upstreams(values: list[str]) -> dict[Api, str]:
    """The upstream of each API from ``--upstream`` values (``URL`` or ``API=URL``)."""
    from turnlog.kernel.wire import DEFAULT_UPSTREAMS

    upstreams: dict[Api, str] = dict(DEFAULT_UPSTREAMS)
    for value in values:
        api, sep, url = value.partition("=")
        if sep and "://" not in api:
            if api not in _APIS:
                raise UserError(f"--upstream {value}: the API is one of {', '.join(_APIS)}, not {api!r}")
            upstreams[api] = url
        else:
            url = value
            upstreams = dict.fromkeys(_APIS, value)
        if not url.startswith(("http://", "https://")):
            raise UserError(f"--upstream {value}: not an http(s) URL")
    return upstreams


def _run(args: argparse.Namespace) -> int:
    if args.server == "uvicorn":
        try:
            import uvicorn  # noqa: F401
        except ImportError as exc:
            raise UserError(f"--server uvicorn needs the ui extra ({exc.name} is missing)") from exc
    from ._cmd_ui import is_loopback

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, not {args.port}")
    token = args.token
    if token is not None and len(token) < 16:
        raise UserError("--token must be at least 16 characters")
    if not is_loopback(args.host) and token is None:
        token = secrets.token_urlsafe(24)
        print(f"turnlog proxy: token (shown once, send it as x-turnlog-token): {token}", file=sys.stderr)
    if not args.timeout > 0:
        raise UserError(f"--timeout must be more than 0 seconds, not {args.timeout}")
    if (args.record_missing or args.pace != "instant") and not args.replay:
        raise UserError("--record-missing and --pace go with --replay")
    upstreams = parse_upstreams(args.upstream)
    anyio.run(_serve, args, upstreams, token)
    return 0


async def _serve(args: argparse.Namespace, upstreams: dict[Api, str], token: str | None) -> None:
    from turnlog.kernel.wire import ProxyApp, ProxyConfig, ReplayIndex, WireRecorder

    from ._inspect import opened_store

    sock = _listen(args.host, args.port)  # before the store: a busy port creates no store
    try:
        # a replay reads a store that must exist; only recording may start a new one
        async with opened_store(args.store, must_exist=args.replay and not args.record_missing) as store:
            replay = await ReplayIndex.load(store, pace=args.pace == "recorded") if args.replay else None
            config = ProxyConfig(
                upstreams,
                token=token,
                max_body=args.max_body,
                timeout=httpx.Timeout(args.timeout, connect=min(args.timeout, 10.0)),
                record_missing=args.record_missing,
            )
            app = ProxyApp(config, await WireRecorder.load(store), replay)
            shown = f"[{args.host}]" if ":" in args.host else args.host
            print(f"turnlog proxy listening on http://{shown}:{sock.getsockname()[1]}", flush=True)
            try:
                if args.server == "uvicorn":
                    await _uvicorn(app, sock)
                else:
                    await _h11(app, sock)
            finally:
                await app.aclose()
    finally:
        sock.close()


async def _uvicorn(app: ProxyApp, sock: socket.socket) -> None:
    import uvicorn

    served = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    await uvicorn.Server(served).serve(sockets=[sock])


async def _h11(app: ProxyApp, sock: socket.socket) -> None:
    """Serve with the h11 server until SIGINT or SIGTERM; then open calls are cancelled (and recorded so)."""
    from turnlog.kernel.wire import serve

    async with anyio.create_task_group() as tg:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            tg.start_soon(partial(serve, app, sock, report=_report))
            async for _ in signals:
                tg.cancel_scope.cancel()
                break


def _report(line: str) -> None:
    """A failed call, on standard error (never a request or response body: see docs/proxy.md)."""
    print(f"turnlog proxy: {line}", file=sys.stderr)


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the line is printed.

    So the announced port is the real one (``--port 0``), and a client that connects right
    after the line waits in the backlog instead of being refused.
    """
    try:
        sock = socket.create_server((host, port), family=_family(host), backlog=512)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    # Accepted connections inherit this: without it Nagle holds the small write that follows
    # the response head until the client's delayed ACK, some 40 ms on every call.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


COMMAND = Command(
    name="proxy",
    help="serve the LLM APIs on loopback and record every model call that passes",
    description="A recording proxy for any agent: point OPENAI_BASE_URL (http://127.0.0.1:PORT/v1), "
    "ANTHROPIC_BASE_URL or GOOGLE_GEMINI_BASE_URL (http://127.0.0.1:PORT) at it. OpenAI Chat Completions "
    "and Responses, Anthropic Messages and Gemini generateContent calls are forwarded unchanged and "
    "recorded as branches (messages, model.called, run lifecycle, one stream.chunk per stream event); "
    "every other path passes through unrecorded. /b/NAME/ in front of the path (or x-turnlog-branch) "
    "names the branch; else calls are threaded into conversations. See docs/proxy.md.",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog proxy --store calls.db --port 8788 --upstream anthropic=http://127.0.0.1:9000",
)
