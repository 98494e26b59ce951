"""Helpers for the LangChain adapter tests: real langchain-core, fake chat models, no network."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage


async def no_sleep(_: float) -> None:
    return None


class ToolCallingFakeModel(GenericFakeChatModel):
    """A scripted chat model that supports ``bind_tools`` (the stock fakes do not)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


def scripted(*messages: AIMessage | str) -> Iterator[AIMessage | str]:
    return iter(messages)


def contract(name: str, action: str, slo: int = 1000, **extra: Any) -> dict[str, Any]:
    return {"name": name, "version": "1.0.0", "can_do": [action], "slo_latency_ms": slo, **extra}
