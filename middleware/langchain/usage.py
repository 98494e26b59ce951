"""What a wrapped runnable's models spent, and the rate limits per model and per tool.

:class:`UsageCallbackHandler` rides along every call of a :class:`~.adapter.LangChainAgent`:
it sums the token usage each model call reports (``AIMessage.usage_metadata``, else the
provider's ``llm_output["token_usage"]``) per model into the reply's ``usage`` (priced,
summed and bounded by the gateway: :mod:`middleware.metering`), and, with
:class:`ModelRateLimits`, takes a token from the bucket of each model before it is called
and of each tool before it runs: over the limit the call fails as ``TOOL_UNAVAILABLE``
(``rate_limited``, ``retry_after_ms``) before the model or tool is reached, so a runaway agent
looping inside one step is bounded too. With Redis buckets the limits hold across replicas
and workers sharing that Redis.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult

from ..errors import AgentFailure
from ..failures import FailureType
from ..messaging.limits import Bucket, BucketStore, MemoryBuckets
from ..usage import Usage, UsageRateLimits
from .callbacks import _response_model, _token_usage

__all__ = ["ModelRateLimits", "ToolLimitHandler", "UsageCallbackHandler"]


class ModelRateLimits:
    """``agency.usage.rate_limits`` over a bucket store (default: this process).

    Args:
        settings: The rules per model and per tool (the first matching one decides).
        store: Where the buckets live (``middleware.redis.rate_limits.RedisBuckets`` to share them).
    """

    def __init__(self, settings: UsageRateLimits, store: BucketStore | None = None) -> None:
        self.settings = settings
        self.store: BucketStore = store or MemoryBuckets()

    async def charge(self, kind: Literal["model", "tool"], name: str) -> None:
        """Take one call of ``name`` from its bucket.

        Raises:
            AgentFailure: TOOL_UNAVAILABLE, ``rate_limited``, when the bucket is empty.
        """
        rule = self.settings.rule(kind, name)
        if rule is None:
            return
        refused = await self.store.take([Bucket(kind, name, rule.rate, rule.burst)])
        if refused is not None:
            _, wait_ms = refused
            raise AgentFailure(
                FailureType.TOOL_UNAVAILABLE,
                f"{kind} {name!r} is over its rate limit ({rule.rate:g}/s, burst {rule.burst}; "
                f"agency.usage.rate_limits.{kind}): retry in {wait_ms} ms",
                context={"rate_limited": True, "retry_after_ms": wait_ms, "source": f"{kind}:{name}"},
            )


class UsageCallbackHandler(AsyncCallbackHandler):
    """Sums token usage per model; charges the rate limits (see the module docstring)."""

    raise_error = True  # a refused rate limit must stop the call, not be logged and ignored
    # not inline: LangChain runs inline handlers one by one first and would leave the others'
    # coroutines unawaited when one raises; the others run concurrently with this one
    run_inline = False

    def __init__(self, limits: ModelRateLimits | None = None) -> None:
        self.limits = limits
        self._models: dict[UUID, str] = {}
        self._sums: dict[str, list[int]] = {}

    def usage(self) -> list[Usage]:
        """What the models spent so far, one entry per model."""
        return [Usage(model=m, input_tokens=i, output_tokens=o) for m, (i, o) in self._sums.items()]

    async def _model_start(
        self, run_id: UUID, serialized: dict[str, Any], metadata: Any, kwargs: Any
    ) -> None:
        model = _model_id(serialized, metadata, kwargs)
        self._models[run_id] = model
        if self.limits is not None:
            await self.limits.charge("model", model)

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        await self._model_start(run_id, serialized, metadata, kwargs)

    async def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        await self._model_start(run_id, serialized, metadata, kwargs)

    async def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        started = self._models.pop(run_id, "")
        reported = _token_usage(response)
        if not reported:
            return
        model = (response.llm_output or {}).get("model_name") or _response_model(response) or started or "-"
        sums = self._sums.setdefault(str(model), [0, 0])
        sums[0] += int(reported.get("input_tokens", 0))
        sums[1] += int(reported.get("output_tokens", 0))


class ToolLimitHandler(BaseCallbackHandler):
    """Takes a token from a tool's bucket before the tool runs.

    A synchronous handler on purpose: LangChain runs a synchronous tool (most are) through its
    synchronous callback manager in a worker thread, where an asynchronous handler's error is
    only logged, never raised. This one blocks that thread while the bucket is charged on the
    agent's event loop, and raises there, before the tool runs.
    """

    raise_error = True

    def __init__(self, limits: ModelRateLimits, loop: asyncio.AbstractEventLoop) -> None:
        self.limits = limits
        self.loop = loop

    def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "tool")
        charge = self.limits.charge("tool", name)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:  # called on the loop itself: it cannot wait for the loop
            charge.close()
            raise AgentFailure(
                FailureType.TOOL_ERROR,
                f"tool {name!r}: its rate limit cannot be checked from the event loop's own thread",
            )
        asyncio.run_coroutine_threadsafe(charge, self.loop).result()


def _model_id(serialized: dict[str, Any] | None, metadata: Any, kwargs: Any) -> str:
    """The model's own name (never the run's name, which the adapter sets to the contract key)."""
    params = kwargs.get("invocation_params") or {}
    for value in (
        params.get("model_name"),
        params.get("model"),
        (metadata or {}).get("ls_model_name"),
        (serialized or {}).get("name"),
    ):
        if value:
            return str(value)
    return "model"
