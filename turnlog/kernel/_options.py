"""What a verb sends to a provider is checked against what that provider takes, before it is sent.

The seed's verbs take ``**kwargs`` as request parameters for the provider (``temperature``,
``max_tokens``...), so a misspelt verb option (``guidence=``) would travel to the provider
silently, and a fake or lenient server never complains. ``check_request_params`` stops that
before any request leaves, with a "did you mean":

- a keyword one edit away from a verb option (``guidence`` for ``guidance``) is refused,
  unless the model declares that it takes that very parameter;
- a keyword the model does not take is refused, for models that declare what they take.

A model declares what it takes with a ``request_params`` attribute (a frozenset of names;
``OpenAIChatModel``, ``AnthropicModel`` and ``GeminiAPIModel`` have one each, ``iModel``
hands on its backend's). A model without one (the test models, a user's own ``ChatModel``),
or with ``request_params = None``, takes anything.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from turnlog.kernel._errors import UnknownOption
from turnlog.kernel.models import as_chat_model

__all__ = ["VERB_OPTIONS", "check_request_params", "one_edit_apart"]

VERB_OPTIONS = frozenset(
    {
        "action_request",
        "action_strategy",
        "actions",
        "authorize",
        "chat_model",
        "clear_messages",
        "context",
        "domain",
        "fuzzy_match",
        "guidance",
        "handle_validation",
        "image_detail",
        "images",
        "imodel",
        "include_token_usage_to_model",
        "instruct",
        "instruction",
        "interpret_model",
        "invoke_actions",
        "max_extensions",
        "max_retries",
        "middle",
        "num_parse_retries",
        "parse_model",
        "persist_dir",
        "persist_options",
        "plain_content",
        "progression",
        "reason",
        "recipient",
        "record_wire",
        "request_fields",
        "request_type",
        "response_format",
        "return_analysis",
        "return_ins_res_message",
        "return_res_message",
        "sample_writing",
        "sender",
        "similarity_threshold",
        "skip_validation",
        "snapshot_dir",
        "strategy",
        "stream",
        "stream_persist",
        "style",
        "suppress_errors",
        "text",
        "timeout",
        "tool_schemas",
        "tools",
    }
)
"""The named options of the Branch verbs (``tests/kernel/test_options.py`` keeps it complete)."""

_MIN_LENGTH = 4  # shorter names are one edit away from too much (``n``, ``seed``, ``stop``...)


def one_edit_apart(a: str, b: str) -> bool:
    """True when ``a`` becomes ``b`` by one inserted, deleted, replaced or swapped character."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diffs = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if len(diffs) == 1:
            return True
        i, j = diffs[0], diffs[-1]
        return len(diffs) == 2 and j == i + 1 and a[i] == b[j] and a[j] == b[i]
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = next((k for k, (x, y) in enumerate(zip(short, long, strict=False)) if x != y), len(short))
    return short[i:] == long[i + 1 :]


def check_request_params(model: object, params: Mapping[str, Any], *, verb: str) -> None:
    """Refuse request parameters that are a misspelt verb option or that ``model`` does not take.

    Args:
        model: The model the request goes to; its ``request_params`` (if any) is what it takes.
        params: The request parameters the verb would send (its extra keyword arguments).
        verb: The verb called, for the message.

    Raises:
        UnknownOption: naming the keyword, the verb, and what it may have meant.
    """
    contract = as_chat_model(model)
    accepted = contract.profile.request_params
    for key in params:
        if accepted is not None and key in accepted:
            continue
        if len(key) >= _MIN_LENGTH:
            near = sorted(o for o in VERB_OPTIONS if len(o) >= _MIN_LENGTH and one_edit_apart(key, o))
            if near:
                raise UnknownOption(
                    verb,
                    key,
                    near,
                    f"{verb}() got {key}=, which is no option of the verb and would go to the model "
                    f"as a request parameter; did you mean {' or '.join(near)}=?",
                )
        if accepted is not None:
            close = difflib.get_close_matches(key, sorted(accepted), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            provider = contract.provider or type(model).__name__
            speaker = contract.profile.transport  # iModel's: the API client
            raise UnknownOption(
                verb,
                key,
                close,
                f"{verb}() got {key}=, which {provider} ({speaker}) does not take as a "
                f"request parameter{hint} (it takes: {', '.join(sorted(accepted))}; a server that "
                "takes more: set the model's request_params)",
            )
