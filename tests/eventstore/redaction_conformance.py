"""Redaction, for every backend that declares the ``"redact"`` capability."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from turnlog.eventstore import (
    REDACTIONS_STREAM,
    EventStore,
    InvalidEventError,
    NewEvent,
    NewSnapshot,
    RecordedEvent,
    Redaction,
    RedactionError,
    encode_json,
    is_redacted,
    redacted_marker,
)
from turnlog.eventstore._encoding import payload_digest
from turnlog.eventstore._redaction import MARKER_KEY, RECORD_TYPE, marker_bytes

__all__ = ["RedactionConformance"]


async def _events(store: EventStore, stream: str) -> list[RecordedEvent]:
    return [event async for event in store.read_stream(stream)]


class RedactionConformance:
    """Mixed into ``StoreConformance``; ``tamper`` overwrites stored ``data`` bytes."""

    async def tamper(
        self, store: EventStore, stream: str, version: int, data: bytes, column: str = "data"
    ) -> None:
        raise NotImplementedError

    @pytest.fixture
    async def filled(self, store: EventStore) -> EventStore:
        if "redact" not in store.capabilities:
            pytest.skip(f"{type(store).__name__} does not redact")
        await store.append(
            "branch-r",
            [
                NewEvent("message.added", {"content": "my email is alice@example.com"}, {"actor": "alice"}),
                NewEvent("message.added", {"content": "second"}),
                NewEvent("message.added", {"content": "third"}),
            ],
        )
        return store

    async def test_redact_keeps_the_envelope_and_verify_names_it(self, filled: EventStore) -> None:
        store = filled
        before = await _events(store, "branch-r")
        result = await store.redact("branch-r", 1, reason="gdpr request", actor="dpo")
        assert (result.changed, result.type, result.erased_bytes > 0) == (True, "message.added", True)
        after = await _events(store, "branch-r")
        for old, new in zip(before, after, strict=True):
            assert (old.id, old.version, old.position, old.type, old.recorded_at, old.hash, old.prev_hash) == (
                new.id, new.version, new.position, new.type, new.recorded_at, new.hash, new.prev_hash,
            )  # fmt: skip
        marker = redacted_marker(after[0].data)
        assert marker is not None and marker.reason == "gdpr request"
        assert after[0].meta == {"actor": "alice"}  # meta stays unless asked
        assert after[1].data == {"content": "second"}
        report = await store.verify()
        assert report.ok, report.problems
        assert (report.redacted, report.redaction_reasons) == (1, ("gdpr request",))
        records = await _events(store, REDACTIONS_STREAM)
        assert [r.data["reason"] for r in records] == ["gdpr request"]
        assert records[0].data["actor"] == "dpo" and records[0].data["event_id"] == str(before[0].id)
        assert "alice@example.com" not in str([r.data for r in records])

    async def test_redact_twice_is_a_no_op(self, filled: EventStore) -> None:
        await filled.redact("branch-r", 2, reason="one")
        again = await filled.redact("branch-r", 2, reason="two")
        assert again.changed is False
        assert len(await _events(filled, REDACTIONS_STREAM)) == 1

    async def test_include_meta_erases_the_meta(self, filled: EventStore) -> None:
        await filled.redact("branch-r", 1, reason="r")
        result = await filled.redact("branch-r", 1, reason="meta too", include_meta=True)
        assert result.changed
        event = (await _events(filled, "branch-r"))[0]
        assert is_redacted(event.data) and is_redacted(event.meta)
        report = await filled.verify()
        assert report.ok, report.problems
        assert report.redacted == 1 and report.redaction_reasons == ("meta too", "r")

    async def test_a_missing_event_is_an_error_and_a_batch_is_all_or_nothing(
        self, filled: EventStore
    ) -> None:
        with pytest.raises(RedactionError) as info:
            await filled.redact("branch-r", 9, reason="x")
        assert (info.value.stream, info.value.version) == ("branch-r", 9)
        with pytest.raises(RedactionError):
            await filled.redact_many([Redaction("branch-r", 1, "x"), Redaction("nope", 1, "x")])
        assert not is_redacted((await _events(filled, "branch-r"))[0].data)
        assert await filled.stream_version(REDACTIONS_STREAM) == 0

    async def test_bad_requests_are_refused(self, filled: EventStore) -> None:
        with pytest.raises(InvalidEventError):
            await filled.redact("branch-r", 1, reason=" ")
        await filled.redact("branch-r", 1, reason="x")
        with pytest.raises(RedactionError):
            await filled.redact(REDACTIONS_STREAM, 1, reason="hide the evidence")

    async def test_redaction_deletes_the_streams_snapshots(self, filled: EventStore) -> None:
        await filled.save_snapshot(NewSnapshot("branch-r", 3, "state.test", {"copy": "alice@example.com"}))
        await filled.redact("branch-r", 1, reason="x")
        assert await filled.load_snapshot("branch-r") is None

    async def test_a_payload_removed_by_hand_fails_verify(self, filled: EventStore) -> None:
        forged = encode_json({"turnlog_redacted": {"digest": "0" * 64, "reason": "x", "record": "y"}})
        await self.tamper(filled, "branch-r", 2, forged)
        report = await filled.verify()
        assert not report.ok
        assert any("without a redaction record" in p.what for p in report.problems), report.problems

    async def test_a_forged_redaction_record_fails_verify(self, filled: EventStore) -> None:
        await filled.redact("branch-r", 1, reason="x")
        record = (await _events(filled, REDACTIONS_STREAM))[0].data
        forged: dict[str, Any] = {**record, "data_digest": "1" * 64}
        await self.tamper(filled, REDACTIONS_STREAM, 1, encode_json(forged))
        report = await filled.verify()
        assert not report.ok
        whats = " ".join(p.what for p in report.problems)
        assert "redaction" in whats and "altered" in whats

    async def test_a_record_for_an_unredacted_payload_fails_verify(self, filled: EventStore) -> None:
        await filled.redact("branch-r", 1, reason="x")
        original = encode_json({"content": "my email is alice@example.com"})
        await self.tamper(filled, "branch-r", 1, original)
        report = await filled.verify()
        assert any("still stored" in p.what for p in report.problems), report.problems

    async def _marker_edit_fails_verify(self, store: EventStore, field: str, value: str, what: str) -> None:
        await store.redact("branch-r", 1, reason="gdpr request")
        marker = (await _events(store, "branch-r"))[0].data
        edited = {MARKER_KEY: {**marker[MARKER_KEY], field: value}}
        await self.tamper(store, "branch-r", 1, encode_json(edited))
        report = await store.verify()
        assert not report.ok
        assert any(what in p.what for p in report.problems), report.problems

    async def test_an_edited_marker_reason_fails_verify(self, filled: EventStore) -> None:
        """The reason a marker shows is the one its redaction record gives."""
        await self._marker_edit_fails_verify(
            filled, "reason", "routine cleanup", "reason in the redaction marker"
        )

    async def test_an_edited_marker_record_id_fails_verify(self, filled: EventStore) -> None:
        """A marker names the record that erased it, no other."""
        other = str(uuid.uuid4())
        await self._marker_edit_fails_verify(filled, "record", other, "names another record")

    async def test_meta_erased_by_hand_after_a_redaction_of_the_payload_fails_verify(
        self, filled: EventStore
    ) -> None:
        """A record of the payload does not cover a marker put in place of the meta, even with its true digest."""
        await filled.redact("branch-r", 1, reason="gdpr request")
        (record,) = await _events(filled, REDACTIONS_STREAM)
        digest = payload_digest(encode_json({"actor": "alice"}))
        forged = marker_bytes(digest, "gdpr request", str(record.id))
        await self.tamper(filled, "branch-r", 1, forged, column="meta")
        report = await filled.verify()
        assert not report.ok
        assert any("meta was erased without a redaction record" in p.what for p in report.problems), (
            report.problems
        )

    async def test_a_second_forged_record_for_a_redacted_event_fails_verify(self, filled: EventStore) -> None:
        """A record with a false digest for a payload another record erased already is reported."""
        await filled.redact("branch-r", 1, reason="gdpr request")
        (record,) = await _events(filled, REDACTIONS_STREAM)
        forged = {**record.data, "data_digest": "1" * 64, "reason": "forged"}
        await filled.append(REDACTIONS_STREAM, [NewEvent(RECORD_TYPE, forged)])
        report = await filled.verify()
        assert not report.ok
        assert any("a second time" in p.what for p in report.problems), report.problems

    async def test_a_record_naming_another_event_id_fails_verify(self, filled: EventStore) -> None:
        """The record's event id and type are checked against the event it names."""
        await filled.redact("branch-r", 1, reason="gdpr request")
        (record,) = await _events(filled, REDACTIONS_STREAM)
        await filled.append(
            REDACTIONS_STREAM,
            [NewEvent(RECORD_TYPE, {**record.data, "version": 2, "event_id": str(uuid.uuid4()), "data_digest": None,
                                    "meta_digest": None})],
        )  # fmt: skip
        report = await filled.verify()
        assert any("names another event" in p.what for p in report.problems), report.problems
