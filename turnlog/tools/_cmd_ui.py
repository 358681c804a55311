"""``turnlog ui``: serve the time-travel debugger for a store in the browser (``turnlog.tools.ui``)."""

from __future__ import annotations

import argparse
import ipaddress
import secrets
import sys

from ._command import Command, UserError, add_store_argument, sqlite_file, store_url

__all__ = ["COMMAND", "is_loopback"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store_argument(parser, json_flag=False)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (default: 8765; 0 picks a free one)")
    parser.add_argument("--open", action="store_true", help="open the app in the default browser")
    parser.add_argument(
        "--allow-writes",
        action="store_true",
        help="open the store for writing and offer the actions (fork at a version, recover crashed runs)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help="token every request must present; required off loopback (generated and printed when not given)",
    )
    parser.add_argument(
        "--analytics-db",
        default=None,
        metavar="PATH",
        help="SQLite file for the analytics tables (default: the store's file with --allow-writes, "
        "else a private temporary file)",
    )
    parser.add_argument("--persist-dir", default=None, help="where recover looks for stream buffers")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names a loopback address (``localhost`` included)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from .ui import UIConfig, create_app
    except ImportError as exc:
        raise UserError(f"needs the ui extra ({exc.name} is missing): pip install 'turnlog[ui]'") from exc
    url = store_url(args.store)
    path = sqlite_file(url)
    if path is not None and not path.exists():
        raise UserError(f"no store at {path} (give --store or set TURNLOG_STORE)")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, not {args.port}")
    loopback = is_loopback(args.host)
    token = args.token
    if token is not None and len(token) < 16:
        raise UserError("--token must be at least 16 characters")
    if not loopback and token is None:
        token = secrets.token_urlsafe(24)
        print(f"token (shown once): {token}", flush=True)
    app = create_app(
        UIConfig(
            url,
            allow_writes=args.allow_writes,
            token=token,
            loopback=loopback,
            analytics_db=args.analytics_db,
            persist_dir=args.persist_dir,
        )
    )
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=2, lifespan="on"
    )
    server = uvicorn.Server(config)
    return _serve(server, args, token)


def _serve(server: object, args: argparse.Namespace, token: str | None) -> int:
    import threading
    import webbrowser

    import uvicorn

    assert isinstance(server, uvicorn.Server)

    def announce() -> None:
        # the port is known once the server is listening (``--port 0`` picks one)
        while not server.started and not server.should_exit:
            threading.Event().wait(0.05)
        if not server.started:
            return
        port = server.servers[0].sockets[0].getsockname()[1] if server.servers else args.port
        shown = f"[{args.host}]" if ":" in args.host else args.host
        address = f"http://{shown}:{port}/"
        mode = "writes allowed" if args.allow_writes else "read-only"
        print(f"turnlog ui: serving {address} ({mode}); Ctrl-C stops it", flush=True)
        if token is not None:
            print(f"open {address}?token={token}", flush=True)
        if args.open:
            webbrowser.open(address + (f"?token={token}" if token else ""))

    threading.Thread(target=announce, daemon=True).start()
    server.run()
    if not server.started:
        print("turnlog ui: the server did not start (is the port free?)", file=sys.stderr)
        return 1
    return 0


COMMAND = Command(
    name="ui",
    help="serve a time-travel debugger for the store in the browser (needs turnlog[ui])",
    description="Serve a local web app over the store: branches, the conversation at any version with a "
    "scrubber and diffs, forks, runs with their chunks (live), replay and verify, analytics charts "
    "and a live tail. Read-only unless --allow-writes; binds 127.0.0.1 unless --host, and any other "
    "address needs a token on every request.",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog ui --store turnlog.db --open",
)
