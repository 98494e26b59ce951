"""Any LangChain ``Runnable`` as a governed agent.

:func:`wrap_runnable` (or :class:`LangChainAgent`) turns a chain, an agent executor,
a LangGraph compiled graph or a chat model into an agent callable for
``Agency.register(contract, agent)`` or ``agency worker``. One call goes:

1. **check** the SMF content against the contract's ``input_schema``
   (a mismatch is SCHEMA_VIOLATION on the input);
2. **map** the content to the runnable's input (``input_mapping``), adding the
   contract as prompt variables (:func:`contract_variables`) so the agent knows
   what it may and may not do;
3. **invoke** it with ``ainvoke`` (or ``astream``, aggregating the chunks, when
   ``stream=True``, when the runnable's model was built with ``streaming=True``, or when its
   contract has ``stream_progress``: then every token delta of its chat models goes to the
   task's event stream as an ``agent.progress`` event of kind ``token``, never audited),
   with an :class:`~middleware.langchain.callbacks.AuditCallbackHandler` when an
   audit log is given;
4. **map** the result back (``output_mapping``) to a JSON value, and return an
   :class:`~middleware.agents.AgentReply` with a confidence score and provenance.

Default mappings
----------------
Input (``input_mapping=None``): a chat model gets ``[SystemMessage(contract text),
HumanMessage(instruction + content)]`` (the step's instruction, i.e. the user's request
by default, followed by the content as JSON); any other runnable gets the content dict
plus the contract variables and ``input`` = the instruction (unless the content has an
``input`` of its own), or ``{"input": text, ...}`` for text content.
``input_mapping`` may instead be a variable name (text content goes under it), a
``{variable: "$.json.path"}`` mapping into the content, or a callable taking the
:class:`~middleware.agents.AgentRequest` (:func:`as_messages` is the one for LangGraph
agents: ``{"messages": [SystemMessage(contract), HumanMessage(content)]}``).

Output (``output_mapping=None``): a message gives its text content; a LangGraph
state ``{"messages": [...]}`` gives the last message's content; a pydantic model is
dumped; a dict or a string is kept as is. ``output_mapping`` may instead be a key
or a ``$.json.path`` into the result, or a callable.

Confidence: a ``confidence`` (or ``confidence_score``) number in the result dict,
the pydantic result or the message's ``response_metadata``; otherwise
:data:`DEFAULT_CONFIDENCE` (0.8: an LLM answer that states no confidence is trusted
less than a deterministic program, which gets 1.0, but stays above the 0.7 below
which hedged answers count as ambiguous). A reported confidence outside 0..1 is a
SCHEMA_VIOLATION.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackManager
from langchain_core.language_models import BaseChatModel, BaseLanguageModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig
from pydantic import BaseModel

from ..agents import AgentReply, AgentRequest
from ..audit import AuditLog
from ..contracts import CapabilityContract
from ..errors import AgentFailure, ContractViolation
from ..failures import FailureType
from ..jsonpath import JsonPath, JsonPathError
from ..smf import Provenance
from ..task_progress import TOKEN, current_progress, emit_progress
from .callbacks import AuditCallbackHandler
from .errors import failure_from_exception
from .output import NOTHING, message_text, structured_output
from .usage import ModelRateLimits, ToolLimitHandler, UsageCallbackHandler

__all__ = [
    "DEFAULT_CONFIDENCE",
    "LangChainAgent",
    "as_messages",
    "contract_variables",
    "takes_messages",
    "wrap_runnable",
]

#: Confidence of a result that reports none (see the module docstring for why 0.8).
DEFAULT_CONFIDENCE = 0.8

InputMapping: TypeAlias = str | Mapping[str, str] | Callable[[AgentRequest], Any] | None
OutputMapping: TypeAlias = str | Callable[[Any], Any] | None
ConfidenceSource: TypeAlias = float | Callable[[Any], float | None]


def contract_variables(contract: CapabilityContract) -> dict[str, str]:
    """The prompt variables that tell a wrapped agent its limits.

    ``contract`` (a paragraph for a system prompt), ``contract_name``,
    ``contract_can_do`` and ``contract_cannot_do`` (comma-separated).
    """
    can = ", ".join(contract.can_do)
    cannot = ", ".join(contract.cannot_do) or "nothing listed"
    text = (
        f"You are {contract.key}"
        + (f": {contract.description}" if contract.description else "")
        + f". You may only: {can}. You must never: {cannot}."
        + (
            " Answer with JSON matching this schema: " + json.dumps(contract.output_schema, sort_keys=True)
            if contract.output_schema
            else ""
        )
    )
    return {
        "contract": text,
        "contract_name": contract.key,
        "contract_can_do": can,
        "contract_cannot_do": cannot,
    }


class LangChainAgent:
    """A LangChain ``Runnable`` behind a capability contract (an agent callable).

    Args:
        runnable: Any runnable: chain, agent executor, compiled graph, chat model.
        contract: The contract it is registered under (``.contract`` is the parsed one).
        input_mapping: How SMF content becomes the runnable's input (module docstring).
        output_mapping: How the runnable's result becomes the output (module docstring).
        confidence: The confidence when the result states none, or a callable
            ``result -> float | None`` (None = fall back to :data:`DEFAULT_CONFIDENCE`).
        stream: ``True`` = ``astream`` and aggregate the chunks; ``False`` = ``ainvoke``;
            ``None`` = stream when the runnable's model was built with ``streaming=True``.
        inject_contract: Add :func:`contract_variables` to dict inputs (never overriding
            a key the content already has).
        audit: Where the inner steps (LLM and tool calls) are written; None = not written.
        capture_io: Record prompt/answer/tool previews in those audit records.
        reliability: Provenance reliability of the output (default: the input's).
        config: Extra ``RunnableConfig`` (tags, metadata, ``max_concurrency`` ...).
        rate_limits: Buckets per model and per tool taken before each call
            (:class:`~.usage.ModelRateLimits`; ``agency serve`` gives its agents the definition's
            ``agency.usage.rate_limits``); None = not limited. The models' token usage is
            reported in the reply's ``usage`` either way.
    """

    def __init__(
        self,
        runnable: Runnable[Any, Any],
        contract: CapabilityContract | Mapping[str, Any],
        *,
        input_mapping: InputMapping = None,
        output_mapping: OutputMapping = None,
        confidence: ConfidenceSource = DEFAULT_CONFIDENCE,
        stream: bool | None = None,
        inject_contract: bool = True,
        audit: AuditLog | None = None,
        capture_io: bool = True,
        reliability: float | None = None,
        config: RunnableConfig | None = None,
        rate_limits: ModelRateLimits | None = None,
    ) -> None:
        if not isinstance(runnable, Runnable):
            raise TypeError(f"expected a LangChain Runnable, got {type(runnable).__name__}")
        self.runnable = runnable
        self.contract = CapabilityContract.parse(contract, what="capability contract")
        self.input_mapping = input_mapping
        self.output_mapping = output_mapping
        self.confidence = confidence
        self.stream = _declares_streaming(runnable) if stream is None else stream
        self.inject_contract = inject_contract
        self.audit = audit
        self.capture_io = capture_io
        self.reliability = reliability
        self.config: RunnableConfig = config or {}
        self.rate_limits = rate_limits
        if isinstance(confidence, int | float) and not 0 <= confidence <= 1:
            raise ValueError(f"confidence must be within 0..1, got {confidence}")
        self.takes_messages = input_mapping is None and takes_messages(runnable)
        if isinstance(input_mapping, Mapping):
            for variable, path in input_mapping.items():
                try:
                    JsonPath.compile(path)
                except JsonPathError as exc:
                    raise ValueError(f"input_mapping[{variable!r}]: {exc}") from None

    @property
    def name(self) -> str:
        return self.runnable.get_name()

    async def __call__(self, request: AgentRequest) -> AgentReply:
        """Run the runnable for one request (see the module docstring for the steps)."""
        contract = request.contract
        try:
            contract.check_input(request.input)
        except ContractViolation as exc:
            raise AgentFailure(
                FailureType.SCHEMA_VIOLATION, str(exc), cause=exc, context={"direction": "input"}
            ) from None
        value = self.map_input(request)
        handler = self._handler(request)
        tracker = _ErrorSource() if handler is None else None
        config = self._config(request, handler)
        usage = UsageCallbackHandler(self.rate_limits)
        extra: list[Any] = [usage]
        if self.rate_limits is not None and self.rate_limits.settings.tool:
            extra.append(ToolLimitHandler(self.rate_limits, asyncio.get_running_loop()))
        config["callbacks"] = [*_as_list(config.get("callbacks")), *extra]
        if tracker is not None:
            config["callbacks"] = [*_as_list(config.get("callbacks")), tracker]
        forwarding = current_progress() is not None  # the contract streams its progress
        if forwarding:
            config["callbacks"] = [*_as_list(config.get("callbacks")), _TokenForwarder()]
        try:
            result = await (
                self._astream(value, config)
                if self.stream or forwarding
                else self.runnable.ainvoke(value, config)
            )
        except Exception as exc:
            if handler is not None:
                await handler.finish("error")
            if isinstance(exc, AgentFailure):
                raise
            source = handler.last_error[:2] if handler and handler.last_error else None
            if source is None and tracker is not None:
                source = tracker.last
            raise failure_from_exception(exc, source=source) from exc
        finally:
            if handler is not None:  # cancelled by the deadline: record what was in flight
                await handler.finish("unfinished")
        output = self.map_output(result, contract)
        return AgentReply(
            output=output,
            usage=usage.usage(),
            confidence_score=self._confidence(result),
            provenance=Provenance(
                source=f"{contract.key} (langchain {self.name})",
                reliability_score=(
                    self.reliability
                    if self.reliability is not None
                    else request.message.metadata.provenance.reliability_score
                ),
            ),
        )

    # ---------------------------------------------------------------- mappings
    def map_input(self, request: AgentRequest) -> Any:
        """The runnable's input for ``request`` (exactly what ``ainvoke`` receives)."""
        content = request.input
        variables = contract_variables(request.contract) if self.inject_contract else {}
        mapping = self.input_mapping
        if callable(mapping) and not isinstance(mapping, str):
            value = mapping(request)
        elif isinstance(mapping, Mapping):
            value = {var: _first(JsonPath.compile(path).find(content)) for var, path in mapping.items()}
        elif isinstance(mapping, str):
            value = dict(content) if isinstance(content, dict) else {mapping: _text(content)}
        elif self.takes_messages:
            state: list[BaseMessage] = [HumanMessage(_human_text(request))]
            if self.inject_contract:
                state.insert(0, SystemMessage(variables["contract"]))
            return {"messages": state}
        elif isinstance(self.runnable, BaseLanguageModel):
            if not isinstance(self.runnable, BaseChatModel):
                return _text(content)
            messages: list[BaseMessage] = [HumanMessage(_human_text(request))]
            if self.inject_contract:
                messages.insert(0, SystemMessage(variables["contract"]))
            return messages
        else:
            value = dict(content) if isinstance(content, dict) else {"input": _text(content)}
            if request.text:
                value.setdefault("input", request.text)
        if isinstance(value, dict) and not _is_message_list(value.get("messages")):
            return {**variables, **value}
        return value  # a message state (LangGraph) carries the contract in its system message

    def map_output(self, result: Any, contract: CapabilityContract | None = None) -> Any:
        """The JSON output for the runnable's ``result``.

        ``contract`` (default: the wrapped one) decides whether an object is expected: when
        its ``output_schema`` is an object, the default mapping parses structured output.
        """
        mapping = self.output_mapping
        if callable(mapping) and not isinstance(mapping, str):
            return _jsonable(mapping(result))
        if isinstance(mapping, str):
            data = _plain(result)
            if mapping.startswith("$"):
                found = JsonPath.compile(mapping).find(data)
                picked = _first(found)
            else:
                picked = data.get(mapping) if isinstance(data, dict) else None
                found = [picked] if isinstance(data, dict) and mapping in data else []
            if not found:
                raise AgentFailure(
                    FailureType.SCHEMA_VIOLATION,
                    f"output_mapping {mapping!r} found nothing in the result",
                    context={"direction": "output"},
                )
            return _jsonable(picked)
        schema = (contract or self.contract).output_schema
        if _wants_object(schema):
            structured = structured_output(result, schema)
            if structured is not NOTHING:
                return _jsonable(structured)
        if isinstance(result, dict) and _is_message_list(result.get("messages")):
            return message_text(result["messages"][-1])
        return _jsonable(_plain(result))

    # ----------------------------------------------------------------- helpers
    def _confidence(self, result: Any) -> float:
        source = self.confidence
        reported: Any = source(result) if callable(source) else _reported_confidence(result)
        if reported is None:
            return self.confidence if isinstance(self.confidence, int | float) else DEFAULT_CONFIDENCE
        if isinstance(reported, bool) or not isinstance(reported, int | float) or not 0 <= reported <= 1:
            raise AgentFailure(
                FailureType.SCHEMA_VIOLATION,
                f"reported confidence {reported!r} is not a number within 0..1",
                context={"direction": "output", "field": "confidence"},
            )
        return float(reported)

    def _handler(self, request: AgentRequest) -> AuditCallbackHandler | None:
        if self.audit is None:
            return None
        trace = request.message.metadata.intention_trace
        return AuditCallbackHandler(
            self.audit,
            trace_id=request.message.trace_id,
            task_id=request.task_id,
            agent=request.contract.key,
            step=request.step,
            attempt=request.attempt,
            goal_id=trace[-1] if trace else "",
            capture_io=self.capture_io,
        )

    def _config(self, request: AgentRequest, handler: AuditCallbackHandler | None) -> RunnableConfig:
        config: RunnableConfig = {**self.config}
        if handler is not None:
            existing = config.get("callbacks")
            if isinstance(existing, BaseCallbackManager):  # a manager: add to a copy of it
                manager = existing.copy()
                manager.add_handler(handler, inherit=True)
                config["callbacks"] = manager
            else:
                config["callbacks"] = [*(existing or []), handler]
        config["run_name"] = config.get("run_name") or request.contract.key
        config["tags"] = [*config.get("tags", []), "agency"]
        config["metadata"] = {
            **config.get("metadata", {}),
            "agency_task_id": request.task_id,
            "agency_trace_id": request.message.trace_id,
            "agency_step": request.step,
            "agency_attempt": request.attempt,
        }
        return config

    async def _astream(self, value: Any, config: RunnableConfig) -> Any:
        # Aggregate as LangChain itself does (Runnable.atransform): add chunks while they
        # support ``+``; a chunk type that does not (a cumulative dict) replaces the last.
        final: Any = None
        got = False
        async for chunk in self.runnable.astream(value, config):
            if not got:
                final, got = chunk, True
                continue
            try:
                final = final + chunk
            except TypeError:
                final = chunk
        if not got:
            raise AgentFailure(FailureType.TOOL_ERROR, "the runnable streamed no output")
        return final


def takes_messages(runnable: Any) -> bool:
    """Whether ``runnable`` takes a message state ``{"messages": [...]}`` as its input.

    True for LangGraph graphs over ``MessagesState`` and ``langchain.agents.create_agent``
    agents (their input schema has ``messages`` and requires nothing else).

    Raises:
        ValueError: the input needs ``messages`` and other keys: no default mapping can
            fill those; give ``input_mapping``.
    """
    if isinstance(runnable, BaseLanguageModel):
        return False
    try:
        schema = runnable.get_input_jsonschema()
    except Exception:  # a runnable whose input type has no JSON schema: not a message state
        return False
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or "messages" not in properties:
        return False
    others = sorted(set(schema.get("required") or ()) - {"messages"})
    if others:
        raise ValueError(
            f"{runnable.get_name()} takes messages and also requires {others}: give input_mapping "
            "(a callable returning its whole input)"
        )
    return True


def as_messages(request: AgentRequest) -> dict[str, list[BaseMessage]]:
    """An ``input_mapping`` for message-state runnables (LangGraph graphs, ``create_agent``).

    Gives ``{"messages": [SystemMessage(contract text), HumanMessage(content)]}``
    (a dict content is sent as JSON). The default mapping does the same for a runnable
    whose input schema is a message state (:func:`takes_messages`), with the step's
    instruction before the content.
    """
    return {
        "messages": [
            SystemMessage(contract_variables(request.contract)["contract"]),
            HumanMessage(_text(request.input)),
        ]
    }


def wrap_runnable(
    runnable: Runnable[Any, Any],
    contract: CapabilityContract | Mapping[str, Any],
    *,
    input_mapping: InputMapping = None,
    output_mapping: OutputMapping = None,
    confidence: ConfidenceSource = DEFAULT_CONFIDENCE,
    **options: Any,
) -> LangChainAgent:
    """Wrap ``runnable`` as an agent for ``Agency.register(agent.contract, agent)``.

    Same arguments as :class:`LangChainAgent` (``stream``, ``audit``, ``inject_contract``,
    ``capture_io``, ``reliability``, ``config`` as keywords).
    """
    return LangChainAgent(
        runnable,
        contract,
        input_mapping=input_mapping,
        output_mapping=output_mapping,
        confidence=confidence,
        **options,
    )


def _declares_streaming(runnable: Any, depth: int = 0) -> bool:
    """True when a model inside ``runnable`` was built with ``streaming=True``."""
    if depth > 20 or runnable is None:
        return False
    if isinstance(runnable, BaseLanguageModel) and getattr(runnable, "streaming", False) is True:
        return True
    children: list[Any] = list(getattr(runnable, "steps", None) or [])
    for attr in ("bound", "runnable", "default"):
        child = getattr(runnable, attr, None)
        if isinstance(child, Runnable):
            children.append(child)
    steps = getattr(runnable, "steps__", None)
    if isinstance(steps, Mapping):
        children.extend(steps.values())
    return any(_declares_streaming(child, depth + 1) for child in children)


def _wants_object(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    return (
        kind == "object"
        or (isinstance(kind, list) and "object" in kind)
        or (kind is None and "properties" in schema)
    )


class _ErrorSource(AsyncCallbackHandler):
    """Remembers which tool or model raised, when no audit handler does (remote workers)."""

    def __init__(self) -> None:
        self._names: dict[Any, tuple[str, str]] = {}
        self.last: tuple[str, str] | None = None

    def _remember(
        self, run_id: Any, kind: str, serialized: dict[str, Any] | None, kw: dict[str, Any]
    ) -> None:
        self._names[run_id] = (kind, str(kw.get("name") or (serialized or {}).get("name") or kind))

    async def on_tool_start(
        self, serialized: dict[str, Any] | None, input_str: str, *, run_id: Any, **kw: Any
    ) -> None:
        self._remember(run_id, "tool", serialized, kw)

    async def on_chat_model_start(
        self, serialized: dict[str, Any] | None, messages: Any, *, run_id: Any, **kw: Any
    ) -> None:
        self._remember(run_id, "model", serialized, kw)

    async def on_llm_start(
        self, serialized: dict[str, Any] | None, prompts: Any, *, run_id: Any, **kw: Any
    ) -> None:
        self._remember(run_id, "model", serialized, kw)

    async def on_tool_error(self, error: BaseException, *, run_id: Any, **kw: Any) -> None:
        self.last = self._names.get(run_id, self.last)

    async def on_llm_error(self, error: BaseException, *, run_id: Any, **kw: Any) -> None:
        self.last = self._names.get(run_id, self.last)


class _TokenForwarder(AsyncCallbackHandler):
    """Each token delta of a chat model, to the task's event stream (``agent.progress``)."""

    async def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: Any = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        text = token if isinstance(token, str) else "".join(_block_text(b) for b in token)
        if text:
            emit_progress(TOKEN, {"text": text})


def _block_text(block: str | dict[str, Any]) -> str:
    """The text of one content block of a token (a string, or ``{"type": "text", "text": ...}``)."""
    if isinstance(block, str):
        return block
    text = block.get("text")
    return text if isinstance(text, str) else ""


def _as_list(callbacks: Any) -> list[Any]:
    if callbacks is None:
        return []
    if isinstance(callbacks, BaseCallbackManager):
        return list(callbacks.handlers)
    return list(callbacks)


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def _first(values: list[Any]) -> Any:
    return values[0] if len(values) == 1 else (values or None)


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[-1], BaseMessage)


def _plain(result: Any) -> Any:
    """A result as plain data: messages become their text, pydantic models are dumped."""
    if isinstance(result, BaseMessage):
        return message_text(result)
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json")
    if isinstance(result, dict):
        return {k: _plain(v) for k, v in result.items()}
    if isinstance(result, list | tuple):
        return [_plain(v) for v in result]
    return result


def _jsonable(value: Any) -> Any:
    value = _plain(value)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise AgentFailure(
            FailureType.SCHEMA_VIOLATION,
            f"output is not JSON ({exc}); set output_mapping to convert it",
            context={"direction": "output"},
        ) from None
    return value


def _reported_confidence(result: Any) -> Any:
    if isinstance(result, BaseMessage):
        meta = result.response_metadata or {}
        return meta.get("confidence", meta.get("confidence_score"))
    if isinstance(result, BaseModel):
        result = result.model_dump()
    if isinstance(result, dict):
        return result.get("confidence", result.get("confidence_score"))
    return None


def _human_text(request: AgentRequest) -> str:
    """What a chat model is asked: the step's instruction, with the structured input if any."""
    content = request.input
    if not request.text:
        return _text(content)
    if content in (None, "", {}, []) or content == request.text:
        return request.text
    return f"{request.text}\n\nInput:\n{_text(content)}"
