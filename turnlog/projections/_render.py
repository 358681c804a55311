"""Minimal YAML rendering of JSON values, used to show structured content to a model.

The output is meant for reading (by people and models), so it is compact block YAML: strings
plain when that is unambiguous, otherwise JSON-quoted; multi-line strings as literal blocks.

Key order: the top level keeps the order it is given (the section headings a prompt is built
from); every nested mapping is rendered in sorted key order. Nested values are data (context,
tool and response schemas) that the log stores as canonical, sorted-key JSON, so sorting
makes the rendering of a message identical whether it was just made or rebuilt from the log:
the same branch always sends the same prompt, and a replay reproduces it exactly.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["render_yaml"]

_PLAIN = re.compile(r"[A-Za-z0-9_(][^\n]*\Z")
_LOOKS_TYPED = re.compile(r"(true|false|null|yes|no|on|off|~|[-+]?[0-9][0-9_.eE+-]*)\Z", re.IGNORECASE)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    text = str(value)
    plain = (
        _PLAIN.match(text)
        and text == text.strip()
        and ": " not in text
        and " #" not in text
        and not text.endswith(":")
        and not _LOOKS_TYPED.match(text)
    )
    return text if plain else json.dumps(text, ensure_ascii=False)


def _lines(value: Any, indent: str, depth: int = 1) -> list[str]:
    if isinstance(value, dict):
        if not value:
            return [indent + "{}"]
        out: list[str] = []
        items = value.items() if depth == 0 else sorted(value.items(), key=lambda kv: str(kv[0]))
        for key, item in items:
            out.extend(_entry(indent + _scalar(key) + ":", item, indent))
        return out
    if isinstance(value, list | tuple):
        if not value:
            return [indent + "[]"]
        out = []
        for item in value:
            if isinstance(item, dict) and item:
                # a mapping item starts on the dash line: "- key: value"
                nested = _lines(item, indent + "  ")
                out.append(indent + "- " + nested[0].lstrip())
                out.extend(nested[1:])
            else:
                out.extend(_entry(indent + "-", item, indent))
        return out
    if isinstance(value, str) and "\n" in value:
        return [indent + "|", *(indent + "  " + line for line in value.split("\n"))]
    return [indent + _scalar(value)]


def _entry(head: str, item: Any, indent: str) -> list[str]:
    """One mapping entry or list item: inline when scalar, nested below otherwise."""
    if isinstance(item, dict | list | tuple) and item:
        return [head, *_lines(item, indent + "  ")]
    if isinstance(item, str) and "\n" in item:
        return [head + " |", *(indent + "  " + line for line in item.split("\n"))]
    return [head + " " + _lines(item, "")[0]]


def render_yaml(value: Any) -> str:
    """Render a JSON value as minimal block YAML.

    Example:
        >>> print(render_yaml({"Function": "add", "Arguments": {"a": 1, "b": 2}}))
        Function: add
        Arguments:
          a: 1
          b: 2
    """
    return "\n".join(_lines(value, "", 0))
