"""The CLI parsers and the failure classification against lines the real CLIs printed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from turnlog.kernel._assembler import StreamAssembler
from turnlog.kernel.models import ClaudeCodeModel, CodexModel, ExitStatus, GeminiModel, StreamChunk
from turnlog.kernel.models._cli_errors import cli_failure
from turnlog.projections import ActionResponse, AssistantResponse, Usage

HERE = Path(__file__).parent / "transcripts"
PARSERS = {"claude_code": ClaudeCodeModel, "codex": CodexModel, "gemini": GeminiModel}


def lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


def parse(provider: str, events: list[dict[str, Any]]) -> tuple[Any, list[StreamChunk]]:
    parser = PARSERS[provider]().new_parser(0.0)
    chunks = [chunk for event in events for chunk in parser.feed(event)]
    return parser, chunks


def assemble(chunks: list[StreamChunk]) -> tuple[StreamAssembler, list[Any]]:
    assembler = StreamAssembler(branch_id="b", user="u", run_id="r")
    messages = [m for seq, chunk in enumerate(chunks, 1) for m in assembler.feed(seq, chunk)]
    return assembler, messages + assembler.flush()


def test_claude_partial_deltas_are_chunks_and_the_final_block_adds_no_duplicate() -> None:
    _, chunks = parse("claude_code", lines("claude.real.include-partial-messages.ndjson"))
    texts = [c for c in chunks if c.type == "text"]
    assert [c.content for c in texts] == ["Hello ", "from the fake upstream ", "(user turns seen: 1)."]
    assert all(c.is_delta and not c.metadata for c in texts)
    _, messages = assemble(chunks)
    [response] = messages
    assert isinstance(response, AssistantResponse)
    assert response.response == "Hello from the fake upstream (user turns seen: 1)."
    assert "stream_mismatch" not in response.metadata


def _with_final_text(final: str) -> list[dict[str, Any]]:
    events = copy.deepcopy(lines("claude.real.include-partial-messages.ndjson"))
    for event in events:
        if event["type"] == "assistant":
            event["message"]["content"][0]["text"] = final
    return events


def test_claude_final_block_longer_than_its_deltas_adds_the_rest() -> None:
    _, chunks = parse(
        "claude_code", _with_final_text("Hello from the fake upstream (user turns seen: 1). More.")
    )
    assert chunks[-2].content == " More." and chunks[-2].metadata["reconciled"] == "suffix"
    _, [response] = assemble(chunks)
    assert response.response == "Hello from the fake upstream (user turns seen: 1). More."


def test_claude_final_block_that_disagrees_replaces_the_deltas_and_the_mismatch_is_recorded() -> None:
    _, chunks = parse("claude_code", _with_final_text("Something else entirely."))
    _, [response] = assemble(chunks)
    assert response.response == "Something else entirely."
    [mismatch] = response.metadata["stream_mismatch"]
    assert mismatch["streamed"] == "Hello from the fake upstream (user turns seen: 1)."
    assert mismatch["final"] == "Something else entirely." and mismatch["applied"] is True


def test_claude_tool_transcript_makes_request_response_and_answer() -> None:
    _, chunks = parse("claude_code", lines("claude.real.tool.ndjson"))
    _, messages = assemble(chunks)
    kinds = [m.kind for m in messages]
    assert kinds == ["AssistantResponse", "ActionRequest", "ActionResponse", "AssistantResponse"]
    assert messages[1].content.function == "Read"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("claude.real.upstream-401.ndjson", "auth"),
        ("claude.real.upstream-429.ndjson", "rate_limit"),
        ("claude.real.resume-unknown-uuid.ndjson", "session_not_found"),
    ],
)
def test_claude_is_error_results_are_classified_from_their_text(name: str, kind: str) -> None:
    parser, chunks = parse("claude_code", lines(name))
    error = chunks[-1]
    assert error.type == "error" and error.metadata["kind"] == kind
    assert not [c for c in chunks if c.type == "text"]  # the synthetic error prose is not an answer
    failure = cli_failure(
        ExitStatus(1),
        "",
        texts=parser.error_texts,
        provider="claude_code",
        model="m",
        http_status=parser.http_status,
    )
    assert failure.kind == kind


@pytest.mark.parametrize(
    ("name", "kind"),
    [("codex.real.upstream-401.ndjson", "auth"), ("codex.real.upstream-429.ndjson", "rate_limit")],
)
def test_codex_failures_are_classified_and_the_message_is_the_turn_failure(name: str, kind: str) -> None:
    parser, chunks = parse("codex", lines(name))
    assert chunks[-1].type == "error" and chunks[-1].metadata["kind"] == kind
    noise = "WARNING: proceeding, even though we could not create PATH aliases\nReading additional input from stdin...\n"
    failure = cli_failure(ExitStatus(1), noise, texts=parser.error_texts, provider="codex", model="m")
    assert failure.kind == kind
    assert str(failure).endswith(lines(name)[-1]["error"]["message"])
    assert "Reading additional input" not in str(failure)


def test_gemini_bad_key_exit_144_is_auth_not_a_signal() -> None:
    parser, chunks = parse("gemini", lines("gemini.real.upstream-400-bad-key.exit144.ndjson"))
    stderr = (HERE / "gemini.real.upstream-400-bad-key.stderr.txt").read_text()
    assert chunks[-1].type == "error" and chunks[-1].metadata["kind"] == "auth"
    failure = cli_failure(ExitStatus(144), stderr, texts=parser.error_texts, provider="gemini", model="m")
    assert failure.kind == "auth" and "API key not valid" in str(failure)
    assert cli_failure(ExitStatus(144), "", provider="gemini", model="m").kind == "bad_request"


def test_gemini_unknown_session_exit_42_is_session_not_found() -> None:
    stderr = (HERE / "gemini.real.resume-unknown-uuid.exit42.stderr.txt").read_text()
    assert cli_failure(ExitStatus(42), stderr, provider="gemini", model="m").kind == "session_not_found"
    assert cli_failure(ExitStatus(42), "", provider="gemini", model="m").kind == "usage"


def test_gemini_empty_tool_output_is_recorded_as_empty_and_says_so() -> None:
    _, chunks = parse("gemini", lines("gemini.real.tool.ndjson"))
    [result] = [c for c in chunks if c.type == "tool_result"]
    assert result.tool_output == "" and result.metadata["empty_output"] is True
    _, messages = assemble(chunks)
    [response] = [m for m in messages if isinstance(m, ActionResponse)]
    assert response.content.output == "" and response.metadata["empty_output"] is True


def test_codex_resumed_usage_is_the_difference_of_the_running_totals() -> None:
    parser = CodexModel().new_parser(0.0)
    parser.resumed = True  # type: ignore[attr-defined]
    parser.baseline = {"input_tokens": 20, "output_tokens": 10, "cached_input_tokens": 0}  # type: ignore[attr-defined]
    chunks = [c for e in lines("codex.real.resume-ok.ndjson") for c in parser.feed(e)]
    result = chunks[-1]
    assert result.metadata["raw_usage"]["input_tokens"] == 26  # the session's running total
    assert result.metadata["usage"] == {
        "input_tokens": 6,
        "output_tokens": 8,
        "cost_usd": None,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }


def test_codex_resumed_usage_without_a_baseline_says_it_is_cumulative() -> None:
    parser = CodexModel().new_parser(0.0)
    parser.resumed = True  # type: ignore[attr-defined]
    chunks = [c for e in lines("codex.real.resume-ok.ndjson") for c in parser.feed(e)]
    assert chunks[-1].metadata["usage_basis"] == "cumulative"


def test_each_cli_reports_its_cache_reads_and_writes_as_usage_counts_them() -> None:
    """Every prompt token is an input token; the cache reads and writes among them are apart.

    Claude Code reports the cache apart from ``input_tokens`` (the Messages API's way); Codex
    and Gemini CLI count the cached tokens inside their input count.
    """
    claude = ClaudeCodeModel().new_parser(0.0)
    [result] = claude.feed(
        {
            "type": "result",
            "subtype": "success",
            "session_id": "s",
            "total_cost_usd": 0.01,
            "usage": {
                "input_tokens": 3,
                "cache_creation_input_tokens": 500,
                "cache_read_input_tokens": 9000,
                "output_tokens": 40,
            },
        }
    )
    assert Usage.from_reported(result.metadata["usage"]) == Usage(
        9503, 40, 0.01, cache_read_tokens=9000, cache_write_tokens=500
    )
    codex = CodexModel().new_parser(0.0)
    [result] = codex.feed(
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 1200, "cached_input_tokens": 1000, "output_tokens": 7},
        }
    )
    assert Usage.from_reported(result.metadata["usage"]) == Usage(1200, 7, cache_read_tokens=1000)
    gemini = GeminiModel().new_parser(0.0)
    [result] = gemini.feed(
        {
            "type": "result",
            "status": "success",
            "stats": {"input_tokens": 800, "output_tokens": 5, "cached": 600, "input": 200},
        }
    )
    assert Usage.from_reported(result.metadata["usage"]) == Usage(800, 5, cache_read_tokens=600)
