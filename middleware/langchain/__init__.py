"""Put existing LangChain runnables behind capability contracts.

Any ``Runnable`` (a chain, an agent executor, a LangGraph compiled graph, a chat
model) becomes a governed agent with :func:`wrap_runnable`::

    agent = wrap_runnable(prompt | model | parser, contract, audit=agency.audit)
    await agency.register(agent.contract, agent)

``adapter`` maps SMF content to the runnable's input and its result back (with a
confidence score and provenance); ``output`` reads structured output from what models
emit (prose around fenced or bare JSON, several objects chosen by the output schema);
``callbacks`` writes the runnable's inner steps
(LLM and tool calls, durations, token usage) to the audit log under the task's
trace id; ``errors`` maps LangChain errors onto the failure vocabulary.

Needs the optional extra: ``pip install 'agency-middleware[langchain]'``.
"""

from __future__ import annotations

try:
    import langchain_core  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "middleware.langchain needs langchain-core, which is not installed. "
        "Install the extra: pip install 'agency-middleware[langchain]'"
    ) from exc

from .adapter import (
    DEFAULT_CONFIDENCE,
    LangChainAgent,
    as_messages,
    contract_variables,
    takes_messages,
    wrap_runnable,
)
from .callbacks import AuditCallbackHandler
from .errors import failure_from_exception
from .output import json_objects, structured_output

__all__ = [
    "DEFAULT_CONFIDENCE",
    "AuditCallbackHandler",
    "LangChainAgent",
    "as_messages",
    "contract_variables",
    "failure_from_exception",
    "json_objects",
    "structured_output",
    "takes_messages",
    "wrap_runnable",
]
