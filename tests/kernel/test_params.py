"""Parameter objects: frozen, slotted, and their declared defaults really apply."""

from __future__ import annotations

import dataclasses

import pytest

from turnlog.kernel import ChatParam, ParseParam, RunParam


def test_declared_defaults_apply() -> None:
    chat = ChatParam()
    assert (chat.image_detail, chat.tool_schemas, chat.imodel_kw, chat.include_token_usage_to_model) == (
        "auto",
        (),
        {},
        False,
    )
    parse = ParseParam()
    assert (parse.handle_validation, parse.max_retries, parse.fuzzy_match) == ("raise", 3, True)
    run = RunParam(stream_persist=True)
    assert run.persist_dir is None and run.image_detail == "auto" and isinstance(run, ChatParam)


def test_frozen_slotted_and_updatable() -> None:
    chat = ChatParam(guidance="be brief")
    with pytest.raises(dataclasses.FrozenInstanceError):
        chat.guidance = "other"  # type: ignore[misc]
    assert not hasattr(chat, "__dict__")
    assert chat.with_updates(context=["x"]) == ChatParam(guidance="be brief", context=["x"])
    with pytest.raises(TypeError):
        chat.with_updates(unknown=1)
