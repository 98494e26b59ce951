"""A LangChain callback handler that writes a wrapped agent's inner steps to the audit log.

One :class:`AuditCallbackHandler` lives for one agent call. Each finished step of the
runnable becomes one ``agent.step`` audit record under the task's trace id:

* ``kind="llm"``: a chat model or LLM call: model name, duration, token usage (from
  ``AIMessage.usage_metadata``, else ``LLMResult.llm_output["token_usage"]``), the
  number of prompt messages, and a preview of the answer (with its tool calls);
* ``kind="tool"``: a tool call: tool name, duration, input and output previews;
* ``kind="runnable"``: the whole run (the root runnable), with its duration.

Errors are recorded with ``outcome="error"`` and the exception type and message.
A step that never finished (the call hit its deadline and was cancelled) is written
with ``outcome="unfinished"`` by :meth:`AuditCallbackHandler.finish`, so the trail
shows what was in flight when the gateway gave up.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from ..audit import AuditLog, AuditRecord
from ..audit.record import Actors, AuditEventType

__all__ = ["AuditCallbackHandler"]


@dataclass
class _Open:
    kind: str
    name: str
    started: float
    parent: str
    detail: dict[str, Any] = field(default_factory=dict)


class AuditCallbackHandler(AsyncCallbackHandler):
    """Writes LLM calls, tool calls and the run itself as ``agent.step`` audit records.

    Args:
        audit: Where to write (the gateway's or the worker's audit log).
        trace_id: The task's trace id (the SMF message's ``trace_id``).
        task_id: The task id.
        agent: Contract key of the wrapped agent (recorded as the actor).
        step: The task step the call serves.
        attempt: Which attempt of that step.
        goal_id: The goal the task serves, if any.
        node: Node name for the records (default: the host name).
        capture_io: Record previews of prompts, answers and tool inputs/outputs.
        max_chars: Length of those previews.
    """

    # Records are written in order, before LangChain moves on (durable before acknowledged).
    run_inline = True
    raise_error = True

    def __init__(
        self,
        audit: AuditLog,
        *,
        trace_id: str,
        task_id: str = "",
        agent: str = "",
        step: str = "",
        attempt: int = 1,
        goal_id: str = "",
        node: str | None = None,
        capture_io: bool = True,
        max_chars: int = 500,
    ) -> None:
        super().__init__()
        self.audit = audit
        self.trace_id = trace_id
        self.task_id = task_id
        self.agent = agent
        self.step = step
        self.attempt = attempt
        self.goal_id = goal_id
        self.node = node
        self.capture_io = capture_io
        self.max_chars = max_chars
        self.written = 0
        #: ``(kind, name, exception)`` of the last inner step that failed, for error mapping.
        self.last_error: tuple[str, str, BaseException] | None = None
        self._open: dict[UUID, _Open] = {}
        self._loop = _running_loop()

    # ------------------------------------------------------------------ models
    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        detail: dict[str, Any] = {"messages": sum(len(m) for m in messages), **_provider(metadata)}
        if self.capture_io and messages and messages[0]:
            detail["prompt_preview"] = self._preview(messages[0][-1].content)
        self._start(run_id, parent_run_id, "llm", _model_name(serialized, metadata, kwargs), detail)

    async def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        detail: dict[str, Any] = {"prompts": len(prompts), **_provider(metadata)}
        if self.capture_io and prompts:
            detail["prompt_preview"] = self._preview(prompts[-1])
        self._start(run_id, parent_run_id, "llm", _model_name(serialized, metadata, kwargs), detail)

    async def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        extra: dict[str, Any] = {}
        usage = _token_usage(response)
        if usage:
            extra["token_usage"] = usage
        model = (response.llm_output or {}).get("model_name") or _response_model(response)
        if model:
            extra["model"] = model
        generation = response.generations[0][0] if response.generations and response.generations[0] else None
        if generation is not None and self.capture_io:
            extra["output_preview"] = self._preview(generation.text)
        if isinstance(generation, ChatGeneration):
            calls = getattr(generation.message, "tool_calls", None) or []
            if calls:
                extra["tool_calls"] = [c.get("name", "") for c in calls]
        await self._end(run_id, "success", extra)

    async def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        await self._error(run_id, error)

    # ------------------------------------------------------------------- tools
    async def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
        detail: dict[str, Any] = {}
        if self.capture_io:
            detail["input_preview"] = self._preview(inputs if inputs is not None else input_str)
        self._start(run_id, parent_run_id, "tool", name, detail)

    async def on_tool_end(
        self,
        output: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        extra: dict[str, Any] = {}
        if self.capture_io:
            extra["output_preview"] = self._preview(getattr(output, "content", output))
        await self._end(run_id, "success", extra)

    async def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        await self._error(run_id, error)

    # -------------------------------------------------- the run itself (root only)
    async def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if parent_run_id is None:
            name = str(kwargs.get("name") or (serialized or {}).get("name") or "runnable")
            self._start(run_id, None, "runnable", name, {})

    async def on_chain_end(
        self,
        outputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if run_id in self._open:
            await self._end(run_id, "success", {})

    async def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if run_id in self._open:
            await self._error(run_id, error, remember=False)

    # ----------------------------------------------------------------- closing
    async def finish(self, outcome: str = "unfinished") -> None:
        """Write a record for every step still open (the call was cancelled or failed)."""
        for run_id in list(self._open):
            await self._end(run_id, outcome, {})

    # ----------------------------------------------------------------- helpers
    def _start(self, run_id: UUID, parent: UUID | None, kind: str, name: str, detail: dict[str, Any]) -> None:
        self._open[run_id] = _Open(kind, name, time.perf_counter(), str(parent or ""), detail)

    async def _error(self, run_id: UUID, error: BaseException, *, remember: bool = True) -> None:
        opened = self._open.get(run_id)
        if remember and opened is not None:
            self.last_error = (opened.kind, opened.name, error)
        outcome = "cancelled" if isinstance(error, asyncio.CancelledError) else "error"
        await self._end(run_id, outcome, {"error": {"type": type(error).__name__, "message": str(error)}})

    async def _end(self, run_id: UUID, outcome: str, extra: dict[str, Any]) -> None:
        opened = self._open.pop(run_id, None)
        if opened is None:
            return
        detail = {
            "kind": opened.kind,
            "name": opened.name,
            "run_id": str(run_id),
            "parent_run_id": opened.parent,
            "step": self.step,
            "attempt": self.attempt,
            "duration_ms": round((time.perf_counter() - opened.started) * 1000, 3),
            **opened.detail,
            **extra,
        }
        record = AuditRecord(
            event_type=AuditEventType.AGENT_STEP.value,
            component="langchain",
            actors=Actors(agent=self.agent),
            task_id=self.task_id,
            trace_id=self.trace_id,
            goal_id=self.goal_id,
            rule=f"{opened.kind}:{opened.name}"[:256],
            outcome=outcome,
            detail=_json_safe(detail),
            **({"node": self.node} if self.node else {}),
        )
        await self._write(record)

    async def _write(self, record: AuditRecord) -> None:
        here = _running_loop()
        if self._loop is None or here is self._loop:
            await self.audit.append(record)
        else:
            # LangChain runs async handlers of sync code paths (a sync tool calling a model)
            # on a throwaway loop in a worker thread; the audit log belongs to our loop.
            future = asyncio.run_coroutine_threadsafe(self.audit.append(record), self._loop)
            await asyncio.wrap_future(future)
        self.written += 1

    def _preview(self, value: Any) -> str:
        if isinstance(value, str):
            text = value
        else:
            try:
                text = json.dumps(value, ensure_ascii=False, default=str)
            except (TypeError, ValueError):
                text = repr(value)
        return text if len(text) <= self.max_chars else text[: self.max_chars - 3] + "..."


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _model_name(serialized: dict[str, Any] | None, metadata: dict[str, Any] | None, kwargs: Any) -> str:
    params = kwargs.get("invocation_params") or {}
    for value in (
        params.get("model_name"),
        params.get("model"),
        (metadata or {}).get("ls_model_name"),
        kwargs.get("name"),
        (serialized or {}).get("name"),
        params.get("_type"),
    ):
        if value:
            return str(value)
    ids: Sequence[str] = (serialized or {}).get("id") or []
    return str(ids[-1]) if ids else "model"


def _response_model(response: LLMResult) -> str:
    for generations in response.generations:
        for gen in generations:
            if isinstance(gen, ChatGeneration):
                name = gen.message.response_metadata.get("model_name") or gen.message.response_metadata.get(
                    "model"
                )
                if name:
                    return str(name)
    return ""


def _provider(metadata: dict[str, Any] | None) -> dict[str, str]:
    """The model's provider as LangChain names it (``ls_provider``: openai, anthropic ...), if known."""
    provider = (metadata or {}).get("ls_provider")
    return {"provider": provider} if isinstance(provider, str) and provider else {}


def _token_usage(response: LLMResult) -> dict[str, int]:
    """Token counts as reported: standard ``usage_metadata`` first, else provider ``llm_output``."""
    totals: dict[str, int] = {}
    for generations in response.generations:
        for gen in generations:
            usage = getattr(getattr(gen, "message", None), "usage_metadata", None)
            if usage:
                for key in ("input_tokens", "output_tokens", "total_tokens"):
                    if isinstance(usage.get(key), int):
                        totals[key] = totals.get(key, 0) + usage[key]
    if totals:
        return totals
    raw = (response.llm_output or {}).get("token_usage") or (response.llm_output or {}).get("usage") or {}
    names = {
        "prompt_tokens": "input_tokens",
        "completion_tokens": "output_tokens",
        "input_tokens": "input_tokens",
        "output_tokens": "output_tokens",
        "total_tokens": "total_tokens",
    }
    for key, value in raw.items() if isinstance(raw, dict) else ():
        if key in names and isinstance(value, int):
            totals[names[key]] = value
    if totals and "total_tokens" not in totals and {"input_tokens", "output_tokens"} <= set(totals):
        totals["total_tokens"] = totals["input_tokens"] + totals["output_tokens"]
    return totals


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))
