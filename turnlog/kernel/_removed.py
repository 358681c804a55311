"""Keywords of the seed's verbs that turnlog does not take, and what to use instead.

A verb checks its ``**kwargs`` against this table before anything is recorded; a hit raises
``RemovedArgument`` (a ``UsageError`` and a ``TypeError``) whose message gives the
replacement and names ``docs/from-lionagi.md``, where each one is explained.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnlog.kernel._errors import RemovedArgument

__all__ = ["REMOVED", "check_removed"]

_FORMAT = "use response_format= (a pydantic model class)"
_MODEL = "use chat_model="

_OPERATE = {
    "request_model": _FORMAT,
    "operative_model": _FORMAT,
    "imodel": _MODEL,
    "field_models": "declare the extra fields on the pydantic model you pass as response_format=",
    "exclude_fields": "pass a response_format= model without those fields",
    "call_params": (
        "tool calls are configured with action_strategy=, suppress_errors= and authorize=; "
        "request parameters such as timeout= go in as plain keywords"
    ),
    "verbose_action": "tool calls are recorded as ActionRequest / ActionResponse messages; "
    "observe MessageAdded signals to show them",
}

REMOVED: Mapping[str, Mapping[str, str]] = {
    "operate": _OPERATE,
    "communicate": {
        "request_model": _FORMAT,
        "operative_model": _FORMAT,
        "imodel": _MODEL,
    },
    "parse": {
        "operative": "use response_format=",
        "similarity_algo": "keys are matched exactly, then without case and punctuation, then by "
        "similarity; tune that with similarity_threshold=",
        "handle_unmatched": "keys that match no field are dropped; give missing fields defaults "
        "on the response_format= model",
        "fill_value": "give missing fields defaults on the response_format= model",
        "fill_mapping": "give missing fields defaults on the response_format= model",
        "strict": "strictness is the response_format= model's own (model_config strict=True)",
    },
    "ReAct": {
        **{k: v for k, v in _OPERATE.items() if k != "imodel"},
        "imodel": "use analysis_model=",
        "intermediate_response_options": "read each round's analysis with return_analysis=True or "
        "iterate ReActStream(); the final format is response_format=",
        "intermediate_listable": "read each round's analysis with return_analysis=True or "
        "iterate ReActStream()",
    },
}
"""Removed keyword -> what to do instead, by verb (``ReActStream`` uses the ``ReAct`` entry)."""


def check_removed(where: str, kwargs: Mapping[str, Any]) -> None:
    """Raise ``RemovedArgument`` when ``kwargs`` holds a keyword ``where`` no longer takes."""
    table = REMOVED.get("ReAct" if where == "ReActStream" else where, {})
    for name, hint in table.items():
        if name in kwargs:
            raise RemovedArgument(where, name, hint)
