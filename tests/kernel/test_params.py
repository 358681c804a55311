"""Parameter objects: frozen, slotted, and their declared defaults really apply."""

from __future__ import annotations

import dataclasses
from typing import Any

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


def test_the_seed_s_model_names_meet_in_one_field() -> None:
    """``imodel=`` (chat) and ``chat_model=`` (communicate, operate, run) both become ``ChatParam.imodel``."""
    from turnlog.kernel._params import build_chat_param

    by_imodel = build_chat_param(imodel="openai/gpt-4.1-mini", images=["a.png"], guidance=None)
    by_chat_model = build_chat_param(chat_model="openai/gpt-4.1-mini", images=["a.png"])
    for param in (by_imodel, by_chat_model):
        assert param.imodel is not None and (param.imodel.provider, param.imodel.model) == (
            "openai",
            "gpt-4.1-mini",
        )
        assert param.images == ("a.png",) and param.guidance is None  # None: the declared default


def test_run_param_from_chat_copies_every_field() -> None:
    """The one ChatParam -> RunParam copy keeps every chat field and adds the run's own."""
    chat = ChatParam(guidance="g", context=["c"], sender="s", images=("i",), imodel_kw={"timeout": 5})
    run = RunParam.from_chat(chat, stream_persist=True, persist_dir="/tmp/runs")
    assert {f.name: getattr(run, f.name) for f in dataclasses.fields(ChatParam)} == {
        f.name: getattr(chat, f.name) for f in dataclasses.fields(ChatParam)
    }
    assert (run.stream_persist, run.persist_dir, run.snapshot_dir) == (True, "/tmp/runs", None)
    assert RunParam.from_chat(run) is run


def test_parse_param_takes_the_given_model_else_the_branch_s() -> None:
    """One rule: the given parse model (even a falsy object), else the branch's parse model."""
    from turnlog.kernel._params import build_parse_param
    from turnlog.testing import ScriptedModel

    class Falsy(ScriptedModel):
        def __bool__(self) -> bool:
            return False

    class Models:
        chat = None
        parse = ScriptedModel("branch's")

        def parse_or(self, given: object) -> object:
            return given if given is not None else self.parse

    models: Any = Models()
    given = Falsy("given")
    assert build_parse_param(models, dict, parse_model=given).imodel is given
    assert build_parse_param(models, dict, max_retries=1).imodel is Models.parse


def test_only_params_builds_parameter_objects() -> None:
    """ChatParam, RunParam and ParseParam are constructed in ``kernel/_params.py`` and nowhere else."""
    import ast
    from pathlib import Path

    import turnlog

    root = Path(turnlog.__file__).parent
    sites = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "_params.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in ("ChatParam", "RunParam", "ParseParam"):
                    sites.append(f"{path.relative_to(root)}:{node.lineno}")
    assert sites == []
