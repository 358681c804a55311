"""Chat models from what a caller or the log gives: objects, ``"provider/model"``, configs.

A branch records its models' configurations in ``branch.created``: an allow-list of safe fields,
scrubbed of credentials (``model_config``);
``Branch.load`` rebuilds them, and a configuration that cannot be rebuilt (a provider this
installation does not know) gives no model and a reason instead of an error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from turnlog.eventstore import EventStore, TurnlogError
from turnlog.kernel._errors import UsageError
from turnlog.kernel.models import ChatModel, as_chat_model, iModel, public_params
from turnlog.kernel.models._contract import is_model_object
from turnlog.kernel.models._secrets import scrub_url

__all__ = ["default_store", "model_config", "rebuild_model", "resolve_model"]

_log = logging.getLogger("turnlog.kernel")


def default_store() -> EventStore:
    """The store used when none is given: ``$TURNLOG_STORE``, else ``./turnlog.db``."""
    from turnlog.eventstore import open_store
    from turnlog.projections import catalogue_upcasters

    return open_store(upcasters=catalogue_upcasters())


def resolve_model(value: Any) -> ChatModel | None:
    """A chat model from a model object (API or CLI agent), a ``"provider/model"`` string or a config dict."""
    if value is None:
        return None
    if isinstance(value, str | Mapping):
        if isinstance(value, str):
            return iModel(value) if "/" in value else iModel(model=value)
        return iModel.from_config(dict(value))
    if is_model_object(value):
        # A model object, taken as it is: the contract's, or one satisfying the small protocol
        # (an API model has ``invoke``, a CLI agent only ``stream``); after ``run(chat_model=...)``
        # a CLI agent is the branch's chat model, and every path that hands it on (``fork``,
        # ``load``) must accept it. The verbs see it through ``as_chat_model``.
        model: ChatModel = value
        return model
    raise UsageError(
        f"a chat model must be a model object, a 'provider/model' string or a dict, not {value!r}"
    )


_RECORDED_FIELDS = ("provider", "model", "base_url", "params", "timeout", "retry")
"""The configuration fields recorded in ``branch.created``: an allow-list, anything else is left out."""


def model_config(model: Any) -> dict[str, Any] | None:
    """The recordable configuration of a model: only the known-safe fields, scrubbed of secrets.

    ``provider``, ``model``, ``base_url`` (without user-info or secret-looking query
    parameters), ``params`` (secret-named entries left out, nested secrets and secret flag
    values replaced), ``timeout`` and ``retry``; whatever else a model's ``to_config`` gives
    (keys, headers, anything new) is never recorded.
    """
    if model is None:
        return None
    given = as_chat_model(model).to_config()
    config = {name: given[name] for name in _RECORDED_FIELDS if name in given}
    if isinstance(config.get("base_url"), str):
        config["base_url"] = scrub_url(config["base_url"], drop=True)
    if isinstance(config.get("params"), Mapping):
        config["params"] = public_params(config["params"])
    return config


def rebuild_model(config: Mapping[str, Any] | None) -> tuple[ChatModel | None, str | None]:
    """Rebuild a model from a recorded config: ``(model, None)``, or ``(None, why not)``.

    Test models are not rebuilt (no reason given). A config naming a provider this
    installation does not know, or options it does not take, gives None and the reason:
    loading a branch never fails because its recorded model cannot be rebuilt.
    """
    if not config or config.get("provider") in (None, "", "test"):
        return None, None
    try:
        return resolve_model(config), None
    except (ValueError, TypeError, TurnlogError) as exc:  # UsageError is a ValueError
        reason = f"recorded model {config.get('provider')}/{config.get('model')} not rebuilt: {exc}"
        _log.debug("%s", reason)
        return None, reason
