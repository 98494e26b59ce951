"""OpenTelemetry GenAI semantic conventions (``gen_ai.*``) on the spans the audit stream makes.

Backends built for LLM traffic (Langfuse, Arize Phoenix, Datadog LLM Observability, Grafana's
GenAI views …) recognise spans by these attributes. :class:`~middleware.server.tracing.TracingAuditLog`
asks this module for them:

* each **dispatch** span (``agency.dispatch <agent>``, a call of a governed agent) carries
  ``gen_ai.operation.name = invoke_agent``, ``gen_ai.agent.name`` and ``gen_ai.agent.id``;
* each **LangChain step** of a wrapped agent (an ``agent.step`` record of
  ``middleware.langchain.callbacks``) becomes a span, child of its dispatch span:

  - a model call: ``chat <model>`` (``gen_ai.operation.name = chat``; ``text_completion`` for
    a plain LLM), ``gen_ai.provider.name`` (LangChain's ``ls_provider``, else ``langchain``),
    ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``,
    ``gen_ai.usage.output_tokens``, ``gen_ai.response.finish_reasons`` when known;
  - a tool call: ``execute_tool <tool>`` (``gen_ai.operation.name = execute_tool``,
    ``gen_ai.tool.name``, ``gen_ai.tool.type = function``);

  timed from the record (it ends at the record's time and lasts its ``duration_ms``), with an
  ERROR status when the step failed. Prompts and completions are not copied into spans (the
  audit log keeps the previews the callback was allowed to capture).
"""

from __future__ import annotations

from typing import Any

__all__ = ["agent_attributes", "step_span_spec"]


def agent_attributes(agent_key: str) -> dict[str, Any]:
    """The ``gen_ai.*`` attributes of a call of the governed agent ``agent_key`` (name@version)."""
    return {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent_key.split("@", 1)[0],
        "gen_ai.agent.id": agent_key,
    }


def step_span_spec(detail: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The name and ``gen_ai.*`` attributes of the span of one ``agent.step`` record's detail,
    or None for a step that is not a model or tool call (the root runnable)."""
    kind, name = detail.get("kind"), str(detail.get("name") or "")
    if kind == "llm":
        operation = "text_completion" if "prompts" in detail else "chat"
        model = str(detail.get("model") or name)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": str(detail.get("provider") or "langchain"),
            "gen_ai.request.model": name,
        }
        if model:
            attributes["gen_ai.response.model"] = model
        usage = detail.get("token_usage") or {}
        if isinstance(usage.get("input_tokens"), int):
            attributes["gen_ai.usage.input_tokens"] = usage["input_tokens"]
        if isinstance(usage.get("output_tokens"), int):
            attributes["gen_ai.usage.output_tokens"] = usage["output_tokens"]
        if detail.get("tool_calls"):
            attributes["gen_ai.response.finish_reasons"] = ["tool_calls"]
        return f"{operation} {name}".strip(), attributes
    if kind == "tool":
        return f"execute_tool {name}".strip(), {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
        }
    return None
