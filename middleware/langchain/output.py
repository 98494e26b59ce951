"""Structured output from what models really emit.

A contract whose ``output_schema`` is an object wants a JSON object; a model's final
message seldom is one and nothing else. :func:`structured_output` takes, by the
libraries' conventions and in this order:

1. the ``structured_response`` of a ``create_agent`` state (its ``response_format``);
2. the arguments of the final message's last tool call (``with_structured_output`` by
   tool calling);
3. the JSON objects in the final message's text, as models write them: the whole text,
   a fenced block (```` ```json ````, with prose before or after it), or bare objects in
   prose ("The status is {…}."), read with LangChain's own JSON parser
   (``langchain_core.utils.json.parse_json_markdown``, non-strict: raw newlines inside
   strings are accepted) and, for objects embedded in prose, a JSON decoder scanning the
   text. When the text holds several objects (an example, then the answer), the output
   schema chooses: the last object that matches it; when none matches, one object is
   returned for the pipeline's schema check to explain, several are refused naming each
   one's first problem.

A final message with no JSON object at all is a ``SCHEMA_VIOLATION`` saying so, with a
preview of the text. Truncated JSON is never completed: a cut-off answer is not an answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.utils.json import parse_json_markdown
from pydantic import BaseModel

from ..errors import AgentFailure
from ..failures import FailureType
from ..schemas import compile_schema

__all__ = ["NOTHING", "json_objects", "message_text", "structured_output"]

#: Objects read from one message at most (a runaway answer is not scanned forever).
MAX_OBJECTS = 20
_FENCE = re.compile(r"```[ \t]*(?:json|JSON|json5|javascript|js)?[ \t]*\r?\n?(.*?)```", re.DOTALL)
_DECODER = json.JSONDecoder(strict=False)


class _Nothing:
    """No structured output found (the result is then mapped as plain data)."""


NOTHING: Any = _Nothing()


def message_text(message: BaseMessage) -> str:
    """A message's text (the text parts of a multi-part content)."""
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(
        part if isinstance(part, str) else str(part.get("text", ""))
        for part in content
        if isinstance(part, str) or (isinstance(part, dict) and part.get("type") == "text")
    )


def _loads(text: str) -> Any:
    return json.loads(text, strict=False)


def json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects a model's text holds, in the order they appear (see the module docstring)."""
    try:  # the whole text is JSON, or one fenced block: LangChain's parser
        whole = parse_json_markdown(text.strip(), parser=_loads)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return [whole]
    found: list[tuple[int, dict[str, Any]]] = []
    outside: list[tuple[int, str]] = []
    last = 0
    for fence in _FENCE.finditer(text):
        outside.append((last, text[last : fence.start()]))
        last = fence.end()
        try:
            value = parse_json_markdown(fence.group(1), parser=_loads)
        except ValueError:
            value = None
        if isinstance(value, dict):
            found.append((fence.start(), value))
        elif isinstance(value, list):
            found.extend((fence.start(), v) for v in value if isinstance(v, dict))
        else:  # a fence holding prose and JSON: scan it like prose
            outside.append((fence.start(1), fence.group(1)))
    outside.append((last, text[last:]))
    for offset, chunk in outside:
        found.extend((offset + at, value) for at, value in _bare_objects(chunk))
    found.sort(key=lambda item: item[0])
    return [value for _, value in found[:MAX_OBJECTS]]


def _bare_objects(text: str) -> list[tuple[int, dict[str, Any]]]:
    """Objects written into prose: each ``{`` that starts a JSON object, outermost only."""
    out: list[tuple[int, dict[str, Any]]] = []
    at = text.find("{")
    while at != -1 and len(out) < MAX_OBJECTS:
        try:
            value, end = _DECODER.raw_decode(text, at)
        except ValueError:
            at = text.find("{", at + 1)
            continue
        if isinstance(value, dict):
            out.append((at, value))
        at = text.find("{", end)
    return out


def structured_output(result: Any, schema: Mapping[str, Any] | None = None) -> Any:
    """The structured output in ``result``, or :data:`NOTHING` when it is not a message or a state.

    Args:
        result: What the runnable returned.
        schema: The contract's ``output_schema``: chooses among several objects in a text.

    Raises:
        AgentFailure: SCHEMA_VIOLATION: the final message holds no JSON object, or several and
            none matches ``schema``.
    """
    if isinstance(result, dict):
        if result.get("structured_response") is not None:
            response = result["structured_response"]
            return response.model_dump(mode="json") if isinstance(response, BaseModel) else response
        messages = result.get("messages")
        if isinstance(messages, list) and messages and isinstance(messages[-1], BaseMessage):
            return _object_in_message(messages[-1], schema)
        return NOTHING
    if isinstance(result, BaseMessage):
        return _object_in_message(result, schema)
    return NOTHING


def _object_in_message(message: BaseMessage, schema: Mapping[str, Any] | None) -> Any:
    calls = getattr(message, "tool_calls", None) or []
    if calls and isinstance(calls[-1].get("args"), dict):
        return calls[-1]["args"]
    text = message_text(message)
    objects = json_objects(text)
    if not objects:
        raise AgentFailure(
            FailureType.SCHEMA_VIOLATION,
            "the contract's output_schema asks for an object but the final message holds no JSON "
            f"object: {_preview(text)!r}",
            context={"direction": "output"},
        )
    if len(objects) == 1 or not schema:
        return objects[-1]
    compiled = compile_schema(dict(schema))
    matching = [o for o in objects if compiled.is_valid(o)]
    if matching:
        return matching[-1]
    why = [f"object {i}: {compiled.problems(value)[0]}" for i, value in enumerate(objects, start=1)]
    raise AgentFailure(
        FailureType.SCHEMA_VIOLATION,
        f"the final message holds {len(objects)} JSON objects and none matches the contract's "
        f"output_schema: {'; '.join(why)}",
        context={"direction": "output", "objects": len(objects)},
    )


def _preview(text: str) -> str:
    text = text.strip()
    return text if len(text) <= 120 else text[:119] + "\u2026"
