"""``turnlog ui`` over HTTP: safety rules, error pages, read-only, actions, figures, PostgreSQL."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from turnlog.tools.ui import display_url

from ._support import XSS_IMG, XSS_SCRIPT, Served, serve

turnlog_main = entry_points(group="console_scripts")["turnlog"].load()  # the installed ``turnlog`` command
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I)


def get(ui: Served, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(ui.url + path, timeout=30, **kwargs)


@pytest.fixture
def small_ui(small_store: Path) -> Iterator[Served]:
    yield from serve(small_store)


def test_every_response_has_the_csp_and_no_inline_script(demo_ui: Served, demo_ids: dict[str, Any]) -> None:
    demo_id, _ = demo_ids["branches"]["demo"]
    for path in [
        "/",
        f"/branches/{demo_id}?at=6",
        "/forks",
        "/verify",
        "/analytics",
        "/tail",
        "/nope",
        "/static/app.js",
    ]:
        r = get(demo_ui, path)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "'unsafe-inline'" not in csp, path
        assert r.headers["x-content-type-options"] == "nosniff"
        if r.headers["content-type"].startswith("text/html"):
            assert not INLINE_SCRIPT.search(r.text), path
            assert " style=" not in r.text, path


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/branches/no-such-branch", 404, "no-such-branch"),
        ("/branches/{demo}?at=999", 404, "there is no version 999"),
        ("/branches/{demo}?at=0", 400, "at must be at least 1"),
        ("/branches/{demo}?at=six", 400, "at must be a whole number"),
        ("/branches/{demo}/diff?a=1&b=x", 400, "b must be a whole number"),
        ("/branches/{demo}/diff?a=1&b=500", 404, "there is no version 500"),
        ("/branches/{demo}?tpage=9", 404, "no page 9"),
        ("/?page=-1", 400, "page must be at least 1"),
        ("/analytics?by=colour", 400, "not 'colour'"),
        ("/runs/no-such-run", 404, "no run 'no-such-run'"),
        ("/no/such/page", 404, "no such page"),
    ],
)
def test_bad_input_gets_a_clear_page_with_the_right_status(
    demo_ui: Served, demo_ids: dict[str, Any], path: str, status: int, words: str
) -> None:
    r = get(demo_ui, path.format(demo=demo_ids["branches"]["demo"][0]))
    assert r.status_code == status
    message = re.search(r'class="error-message">(.*?)</p>', r.text)
    assert message is not None
    assert words in message.group(1).replace("&#x27;", "'")
    assert "Traceback" not in r.text


def test_recorded_html_is_escaped_in_every_page(hostile_store: Path) -> None:
    for ui in serve(hostile_store):
        pages = [
            get(ui, p).text for p in ("/", "/branches/b-xss", "/branches/b-xss/conversation?at=3", "/tail")
        ]
        for text in pages:
            assert "<script>window.__xss" not in text
            assert "<img src=x" not in text
        assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in pages[1]
        assert "&lt;img src=x onerror=&quot;window.__xss = 2&quot;&gt;" in pages[0]
        assert XSS_SCRIPT and XSS_IMG


def test_read_only_by_default_refuses_actions(small_ui: Served) -> None:
    page = get(small_ui, "/branches/b-1")
    assert "fork at this version" not in page.text
    assert "read-only" in page.text
    r = httpx.post(small_ui.url + "/branches/b-1/fork", data={"at": "2", "csrf": "x"}, timeout=30)
    assert r.status_code == 403
    assert "--allow-writes" in r.text
    assert "1 branch(es)" in get(small_ui, "/").text


def test_allow_writes_forks_at_a_version(small_store: Path) -> None:
    for ui in serve(small_store, "--allow-writes"):
        page = get(ui, "/branches/b-1?at=2")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        refused = httpx.post(ui.url + "/branches/b-1/fork", data={"at": "2", "csrf": "forged"}, timeout=30)
        assert refused.status_code == 403
        r = httpx.post(
            ui.url + "/branches/b-1/fork",
            data={"at": "2", "name": "what-if", "csrf": csrf.group(1)},
            timeout=30,
        )
        assert r.status_code == 303
        child = get(ui, r.headers["location"])
        assert "what-if" in child.text
        assert "forked from" in child.text
        assert child.text.count('class="msg role-user') == 1  # version 2: the first message only


def test_a_non_loopback_bind_needs_the_token_on_every_request(small_store: Path) -> None:
    for ui in serve(small_store, "--host", "0.0.0.0"):
        token_line = next(line for line in ui.lines if line.startswith("token (shown once): "))
        token = token_line.split(": ", 1)[1].strip()
        base = ui.url.replace("0.0.0.0", "127.0.0.1")
        assert httpx.get(base + "/", timeout=30).status_code == 401
        assert httpx.get(base + "/static/app.js", timeout=30).status_code == 401
        assert httpx.get(base + "/?token=wrong-token-value", timeout=30).status_code == 401
        first = httpx.get(base + "/branches/b-1?" + urlencode({"token": token, "at": 2}), timeout=30)
        assert first.status_code == 303
        assert first.headers["location"] == "/branches/b-1?at=2"  # the token leaves the URL
        cookie = first.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        with httpx.Client(base_url=base, timeout=30) as client:
            client.get(f"/?token={token}")
            assert client.get("/branches/b-1").status_code == 200  # the cookie carries it
        bearer = httpx.get(base + "/", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert bearer.status_code == 200
        assert sum(line.startswith("token") for line in ui.lines) == 1  # printed once


def test_a_loopback_bind_answers_loopback_host_names_only(small_ui: Served) -> None:
    assert get(small_ui, "/").status_code == 200
    assert get(small_ui, "/", headers={"Host": "localhost"}).status_code == 200
    assert get(small_ui, "/", headers={"Host": "attacker.example"}).status_code == 421


def test_short_token_and_missing_store_are_one_line_errors(tmp_path: Path, small_store: Path) -> None:
    cmd = [sys.executable, "-m", "turnlog.tools", "ui"]
    short = subprocess.run(
        [*cmd, "--store", str(small_store), "--token", "abc"], capture_output=True, text=True
    )
    assert short.returncode == 2
    assert short.stderr.strip() == "turnlog ui: --token must be at least 16 characters"
    missing = subprocess.run([*cmd, "--store", str(tmp_path / "none.db")], capture_output=True, text=True)
    assert missing.returncode == 2
    assert "no store at" in missing.stderr and "Traceback" not in missing.stderr


def test_a_missing_ui_extra_is_a_one_line_error(
    small_store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn now raises ImportError
    assert turnlog_main(["ui", "--store", str(small_store)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "turnlog ui: needs the ui extra (uvicorn is missing): pip install 'turnlog[ui]'"


def test_the_store_url_shown_carries_no_password() -> None:
    shown = display_url("postgresql://app:s3cret@db.example:5433/prod?sslpassword=x&schema=s")
    assert shown == "postgresql://app@db.example:5433/prod"
    assert display_url("sqlite:///tmp/a.db?durability=full") == "sqlite:///tmp/a.db"


def test_replay_page_runs_the_audit_and_execute_replay(demo_ui: Served, demo_ids: dict[str, Any]) -> None:
    demo_id, _ = demo_ids["branches"]["demo"]
    audit = get(demo_ui, f"/branches/{demo_id}/replay")
    assert "audit replay matches" in audit.text and "execute replay matches" not in audit.text
    executed = get(demo_ui, f"/branches/{demo_id}/replay?execute=1")
    assert "execute replay matches: 5 call(s) re-run" in executed.text
    assert "DIVERGENCE" not in executed.text


def test_analytics_shows_the_figures_of_turnlog_stats(
    demo_ui: Served, demo_store: Path, tmp_path: Path
) -> None:
    page = get(demo_ui, "/analytics?by=model").text
    stats = subprocess.run(
        [
            sys.executable,
            "-m",
            "turnlog.tools",
            "stats",
            "--json",
            "--store",
            str(demo_store),
            "--analytics-db",
            str(tmp_path / "a.db"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    usage = json.loads(stats.stdout)["usage"]
    assert usage
    rows = re.findall(r"<tr>(.*?)</tr>", page.split("model calls by model")[1].split("</table>")[0])
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in rows if "<td>" in row]
    assert len(cells) == len(usage)
    for row, expected in zip(cells, usage, strict=True):
        assert row[0] == expected["key"]
        assert row[1:3] == [str(expected["calls"]), str(expected["errors"])]
        assert row[4:6] == [str(expected["input_tokens"]), str(expected["output_tokens"])]
        cost = expected["cost_usd"]
        assert row[6] == ("-" if cost is None else f"{cost:.6f}")
        assert row[7] == f"{expected['latency_ms']['p50']:.0f}"
        assert row[8] == f"{expected['latency_ms']['p95']:.0f}"
    # the per-day series the charts draw: turnlog stats --by model --since DAY --until DAY+1
    import html
    from datetime import date, timedelta

    figures = json.loads(html.unescape(re.search(r'data-figures="([^"]*)"', page).group(1)))
    series = figures["series"]
    (day,) = series["days"]
    until = (date.fromisoformat(day) + timedelta(days=1)).isoformat()
    on_day = subprocess.run(
        [
            sys.executable,
            "-m",
            "turnlog.tools",
            "stats",
            "--json",
            "--store",
            str(demo_store),
            "--analytics-db",
            str(tmp_path / "a.db"),
            "--since",
            day,
            "--until",
            until,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    for r in json.loads(on_day.stdout)["usage"]:
        assert series["tokens"][r["key"]] == [r["input_tokens"] + r["output_tokens"]]
        assert series["p95"][r["key"]] == [r["latency_ms"]["p95"]]
        assert series["error_rate"][r["key"]] == [r["error_rate"]]


@pytest.mark.postgres
def test_serves_a_postgresql_store(small_store: Path, pg_url: str) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "turnlog.tools",
            "migrate",
            "--from",
            f"sqlite:///{small_store}",
            "--to",
            pg_url,
        ],
        check=True,
        capture_output=True,
    )
    for ui in serve(pg_url):
        listing = get(ui, "/")
        assert listing.status_code == 200 and "b-1" in listing.text
        assert "schema=" not in listing.text
        page = get(ui, "/branches/b-1?at=3")
        assert page.status_code == 200 and "version 3: 2 message(s)" in page.text
        assert "verified" in get(ui, "/verify").text
        assert get(ui, "/analytics").status_code == 200


def test_replay_page_shows_the_first_divergent_call(
    demo_store: Path, demo_ids: dict[str, Any], tmp_path: Path
) -> None:
    import shutil
    import sqlite3

    copy = tmp_path / "diverged.db"
    shutil.copy(demo_store, copy)
    conn = sqlite3.connect(copy, isolation_level=None)
    try:
        (position, data) = conn.execute(
            "SELECT position, data FROM events WHERE type = 'model.called' ORDER BY position LIMIT 1"
        ).fetchone()
        payload = json.loads(bytes(data))
        payload["fingerprint"] = "0" * 64
        conn.execute(
            "UPDATE events SET data = ? WHERE position = ?", (json.dumps(payload).encode(), position)
        )
    finally:
        conn.close()
    demo_id, _ = demo_ids["branches"]["demo"]
    for ui in serve(copy):
        page = get(ui, f"/branches/{demo_id}/replay?execute=1").text
        assert 'id="divergence"' in page and "at call 1" in page
        assert "0" * 64 in page  # the recorded fingerprint beside today's
        assert "MISMATCH" in page  # the audit replay sees the rewritten event too


def test_allow_writes_recovers_a_crashed_run(open_run_store: Path) -> None:
    for ui in serve(open_run_store, "--allow-writes"):
        page = get(ui, "/runs/r-live")
        assert "recover crashed runs" in page.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        done = httpx.post(ui.url + "/recover", data={"csrf": csrf.group(1)}, timeout=60)
        assert done.status_code == 200
        assert "1 crashed run(s) closed" in done.text
        after = get(ui, "/runs/r-live").text
        assert "failed (crashed" in after and "recover crashed runs" not in after
    for ui in serve(open_run_store):
        assert "recover crashed runs" not in get(ui, "/branches/b-live").text
        assert httpx.post(ui.url + "/recover", data={"csrf": "x"}, timeout=30).status_code == 403


def test_a_runs_usage_says_what_the_prompt_cache_served() -> None:
    """The run page's usage line names the cache reads and writes when the provider reported them."""
    from turnlog.projections import Usage
    from turnlog.tools.ui._pages import _usage

    assert _usage(Usage(900, 4)) == "900 input, 4 output tokens"
    cached = Usage(900, 4, cache_read_tokens=800, cache_write_tokens=50)
    assert _usage(cached) == "900 input, 4 output tokens (prompt cache: 800 of the input read, 50 written)"
    assert _usage(Usage()) == "not reported"
