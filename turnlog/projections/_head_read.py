"""Reading a stored snapshot head: exact-shape heads built directly, any other validated by pydantic.

``SnapshotHead`` and ``HeadLink`` build their validators on first use (``defer_build``), and a
head holds runs whose times go through a Python validator each. For a cold read (``show --at``
in a fresh process) building the two validators took about as long as the rest of the load of
a 100-turn branch, and validating the runs of the heads about a fifth of a 500-turn load.

``link_of`` and ``head_of`` therefore first check the stored JSON against the exact shape the
writer stores (``SnapshotHead.stored()``): every key a field of the model, every value of the
very type the field holds after validation (``type(x) is int``, a list of three or four strings
for a provider session, a time as ISO text ...). Such a head is built with ``model_construct``
and its runs with their own constructors, which gives what validation gives: on values already
of their field's type, pydantic's lax validation returns them unchanged (containers copied, as
here). Anything else, an unknown key, a float where an int goes, a time that does not parse, is
handed to ``model_validate`` as before, so results and errors do not depend on which path ran
(``tests/projections/test_head_read.py`` holds both paths to that over random heads).

This is a cheaper check, not a skipped one: nothing is taken on trust, a head is read this way
whether or not its record was written by turnlog. The store's own checks (the digest and the
log hash at the head's version) still run before any of this.

``head_and_runs`` (what a snapshot load uses) leaves each run as stored until it is used
(``Deferred``): a read at a past version builds the runs it looks at, not the hundreds a long
branch's keyframe holds. A run is then read by the same two paths, one run at a time, and one
that does not validate raises ``ProjectionError`` where it is used. The path switches itself off when
the models' fields are not the ones it was written for (a field added to ``RunInfo`` and not
here): every head is then validated by pydantic.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ._errors import ProjectionError
from ._runs import Deferred
from ._snapshot_head import HeadLink, SnapshotHead
from ._state import ForkOrigin, RunInfo
from ._usage import Usage

__all__ = ["ENABLED", "head_and_runs", "head_of", "link_of"]

_M = TypeVar("_M", bound=BaseModel)
_INT = (int,)
_OPT_INT = (int, type(None))
_OPT_STR = (str, type(None))
_OPT_FLOAT = (float, type(None))
_OPT_DICT = (dict, type(None))

_LINK_KEYS = frozenset(HeadLink.model_fields)
_LINK_REQUIRED = frozenset(k for k, f in HeadLink.model_fields.items() if f.is_required())
_LINK_SCALARS: dict[str, tuple[type, ...]] = {
    "branch_id": (str,),
    "start": _INT,
    "n": _INT,
    "depth": _INT,
    "base_version": _OPT_INT,
    "base_n": _INT,
    "last_id": _OPT_STR,
    "parts": _INT,
    "keyframe_entries": _INT,
    "delta_entries": _INT,
}
"""The scalar fields of a link and the exact types they hold (``maps`` and ``messages`` apart)."""

_HEAD_KEYS = frozenset(SnapshotHead.model_fields)
_HEAD_REQUIRED = frozenset(k for k, f in SnapshotHead.model_fields.items() if f.is_required())
_HEAD_SCALARS: dict[str, tuple[type, ...]] = {
    "name": _OPT_STR,
    "user": _OPT_STR,
    "session_id": _OPT_STR,
    "version": _INT,
    "position": _INT,
    "model_calls": _INT,
}

_RUN_FIELDS = {f.name: f for f in dataclasses.fields(RunInfo)}
_RUN_REQUIRED = frozenset(
    n
    for n, f in _RUN_FIELDS.items()
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)
_RUN_SCALARS: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "verb": (str,),
    "duration_ms": _OPT_FLOAT,
    "parent_run_id": _OPT_STR,
    "provider": _OPT_STR,
    "model": _OPT_STR,
    "chunks": _OPT_INT,
    "error_type": _OPT_STR,
    "error_message": _OPT_STR,
    "reason": _OPT_STR,
}
_RUN_TIMES = ("started_at", "ended_at")
_STATUSES = frozenset({"running", "ended", "failed"})
_FORK_KEYS = frozenset(f.name for f in dataclasses.fields(ForkOrigin))

ENABLED = (
    _LINK_KEYS == {*_LINK_SCALARS, "maps", "messages"}
    and _HEAD_KEYS
    == _LINK_KEYS
    | {*_HEAD_SCALARS, "system", "chat_model", "parse_model", "metadata", "runs", "provider_sessions"}
    | {"action_links", "forked_from", "created_at", "updated_at", "over"}
    and set(_RUN_FIELDS) == {*_RUN_SCALARS, *_RUN_TIMES, "status", "usage", "recovered"}
    and _FORK_KEYS == {"parent_branch_id", "parent_stream", "parent_version"}
)
"""Whether the models have exactly the fields this path checks (else pydantic validates all)."""

_PLAIN = all(
    not cls.__pydantic_post_init__
    and not cls.__pydantic_root_model__
    and cls.model_config.get("extra") != "allow"
    and all(f.alias is None and f.validation_alias is None for f in cls.model_fields.values())
    for cls in (HeadLink, SnapshotHead)
)
"""Whether ``_built`` may set a head's attributes itself (else ``model_construct`` does)."""
_new = object.__new__
_set = object.__setattr__


def _built(cls: type[_M], fields: dict[str, Any]) -> _M:
    """``cls.model_construct(**fields)``; when every field is given, without its per-field Python loop.

    What it sets is what ``model_construct`` sets: ``__dict__`` in field order, the fields set,
    no extra, no private attributes.
    """
    names = cls.model_fields
    if not _PLAIN or len(fields) != len(names) or not fields.keys() <= names.keys():
        return cls.model_construct(**fields)
    model = _new(cls)
    _set(model, "__dict__", {name: fields[name] for name in names})
    _set(model, "__pydantic_fields_set__", set(names))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model


class _Refused(Exception):
    """The stored head is not of the exact shape: validate it the general way."""


def _scalars(data: dict[str, Any], types: dict[str, tuple[type, ...]], out: dict[str, Any]) -> None:
    for name, allowed in types.items():
        if name in data:
            value = data[name]
            if type(value) not in allowed:
                raise _Refused
            out[name] = value


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    if type(value) is not str:
        raise _Refused
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise _Refused from None


def _message(value: Any) -> dict[str, Any]:
    if type(value) is not dict:
        raise _Refused
    return dict(value)


def _link_fields(data: Any, keys: frozenset[str], required: frozenset[str]) -> dict[str, Any]:
    if type(data) is not dict or not required <= data.keys() or not data.keys() <= keys:
        raise _Refused
    out: dict[str, Any] = {}
    _scalars(data, _LINK_SCALARS, out)
    if "maps" in data:
        if data["maps"] not in ("full", "delta") or type(data["maps"]) is not str:
            raise _Refused
        out["maps"] = data["maps"]
    messages = data["messages"]
    if type(messages) is not list:
        raise _Refused
    out["messages"] = [None if m is None else _message(m) for m in messages]
    return out


def _run(data: Any, usages: dict[Any, Usage]) -> RunInfo:
    """One stored run; ``usages`` holds the usages already read in this head, by their items."""
    if type(data) is not dict or not _RUN_REQUIRED <= data.keys():
        raise _Refused
    fields = dict(data)
    for name, value in data.items():  # one pass: a run is read for every run of every head
        allowed = _RUN_SCALARS.get(name)
        if allowed is not None:
            if type(value) not in allowed:
                raise _Refused
        elif name in _RUN_TIMES:
            fields[name] = _time(value)
        elif name == "status":
            if type(value) is not str or value not in _STATUSES:
                raise _Refused
        elif name == "usage":
            if type(value) is not dict:
                raise _Refused
            try:
                key = tuple(value.items())
                usage = usages.get(key)
            except TypeError:  # an unhashable value: not a count
                raise _Refused from None
            if usage is None:
                # pydantic's own validator, looked up here rather than at import so that a
                # deferred build stays deferred; what it refuses is refused here. Runs of one
                # head share a frozen Usage of equal counts, as equal values may.
                usage = usages[key] = Usage.model_validate(value)
            fields[name] = usage
        elif name == "recovered":
            if type(value) not in _OPT_DICT:
                raise _Refused
            fields[name] = dict(value) if value is not None else None
        else:
            raise _Refused
    return RunInfo(**fields)


class _OneRun(BaseModel):
    """One stored run validated as ``SnapshotHead.runs`` validates each of its items."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    run: RunInfo


def _decode_run(usages: dict[Any, Usage], where: str, data: Any) -> RunInfo:
    """A stored run of a head: the exact-shape path, else pydantic's validation."""
    if ENABLED:
        try:
            return _run(data, usages)
        except (_Refused, TypeError, ValueError):
            pass
    try:
        return _OneRun.model_validate({"run": data}).run
    except ValidationError as exc:
        raise ProjectionError(f"{where}: a stored run does not decode: {exc}") from exc


def _deferred_runs(runs: Any, where: str) -> list[RunInfo | Deferred[RunInfo]]:
    if type(runs) is not list:
        raise _Refused
    decode = partial(_decode_run, {}, where)  # runs of one head share Usage objects of equal counts
    out: list[RunInfo | Deferred[RunInfo]] = []
    for run in runs:
        key = run.get("run_id") if type(run) is dict else None
        if type(key) is not str:
            raise _Refused
        out.append(Deferred(key, run, decode))
    return out


def _session(value: Any) -> tuple[str, ...]:
    if type(value) is not list or len(value) not in (3, 4) or any(type(v) is not str for v in value):
        raise _Refused
    return tuple(value)


def _head_fields(data: Any, where: str | None = None) -> dict[str, Any]:
    """The fields of a head; with ``where`` (naming it for errors), its runs left ``Deferred``."""
    out = _link_fields(data, _HEAD_KEYS, _HEAD_REQUIRED)
    _scalars(data, _HEAD_SCALARS, out)
    system = data["system"]
    out["system"] = None if system is None else _message(system)
    for name in ("chat_model", "parse_model"):
        value = data[name]
        out[name] = None if value is None else _message(value)
    out["metadata"] = _message(data["metadata"])
    runs = data["runs"]
    if where is not None:
        out["runs"] = _deferred_runs(runs, where)
    else:
        if type(runs) is not list:
            raise _Refused
        usages: dict[Any, Usage] = {}
        out["runs"] = [_run(r, usages) for r in runs]
    sessions = data["provider_sessions"]
    if type(sessions) is not list:
        raise _Refused
    out["provider_sessions"] = [_session(s) for s in sessions]
    links = data["action_links"]
    if type(links) is not dict or any(type(v) is not str for v in links.values()):
        raise _Refused  # the keys of a JSON object are strings
    out["action_links"] = dict(links)
    fork = data["forked_from"]
    if fork is not None:
        if (
            type(fork) is not dict
            or fork.keys() != _FORK_KEYS
            or type(fork["parent_branch_id"]) is not str
            or type(fork["parent_stream"]) is not str
            or type(fork["parent_version"]) is not int
        ):
            raise _Refused
        fork = ForkOrigin(**fork)
    out["forked_from"] = fork
    out["created_at"] = _time(data["created_at"])
    out["updated_at"] = _time(data["updated_at"])
    over = data["over"]
    if type(over) is not list:
        raise _Refused
    pairs = []
    for pair in over:
        if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not int:
            raise _Refused
        pairs.append((pair[0], _message(pair[1])))
    out["over"] = pairs
    return out


def link_of(data: Any) -> HeadLink:
    """The chain fields of a stored head (extra keys ignored, as ``HeadLink`` does).

    Raises:
        pydantic.ValidationError: the head does not validate.
    """
    if ENABLED:
        try:
            fields = _link_fields(data, _LINK_KEYS | data.keys(), _LINK_REQUIRED)
            return _built(HeadLink, fields)
        except (_Refused, AttributeError):
            pass  # not a dict (AttributeError on .keys()), or not of the exact shape
    return HeadLink.model_validate(data)


def head_of(data: Any) -> SnapshotHead:
    """The validated head of a stored head record.

    Raises:
        pydantic.ValidationError: the head does not validate.
    """
    if ENABLED:
        try:
            return _built(SnapshotHead, _head_fields(data))
        except _Refused:
            pass
        except (TypeError, ValueError):
            pass  # e.g. a Usage that does not validate: let the general path say why
    return SnapshotHead.model_validate(data)


def head_and_runs(data: Any, where: str) -> tuple[SnapshotHead, list[RunInfo | Deferred[RunInfo]]]:
    """A stored head without its runs, and its runs (``Deferred`` when read the exact-shape way).

    The head's own ``runs`` is empty; the runs are beside it, in order. A deferred run that
    does not validate raises ``ProjectionError`` (naming ``where``) when it is used.

    Raises:
        pydantic.ValidationError: the head (but for its runs, when they are deferred) does
            not validate.
    """
    if ENABLED:
        try:
            fields = _head_fields(data, where)
        except _Refused:
            pass
        except (TypeError, ValueError):
            pass  # let the general path say why
        else:
            runs = fields["runs"]
            fields["runs"] = []
            return _built(SnapshotHead, fields), runs
    head = SnapshotHead.model_validate(data)
    return head.model_copy(update={"runs": []}), list(head.runs)
