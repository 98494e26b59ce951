"""The ``protocols`` section of an agency definition: A2A and MCP, in and out.

Plain settings (no SDK import): the bindings themselves live in ``middleware.server.protocols``
(the ``protocols`` extra) and are loaded only when a setting here turns one on::

    protocols:
      a2a: {address: 127.0.0.1:8470}          # serve A2A (off when empty)
      mcp: {address: 127.0.0.1:8471}          # serve MCP over Streamable HTTP (off when empty)
      a2a_agents:                             # remote A2A agents behind contracts
        - card_url: http://10.0.0.7:9000
          card_sha256: 3f1c...                # the card the operator reviewed
          contract: {name: quote_agent, can_do: [stock_quote], slo_latency_ms: 2000}
      mcp_agents:                             # MCP servers' tools behind contracts
        - url: http://10.0.0.8:8000/mcp       # or command: [python, -m, my_server] (stdio)
          tool: lookup_order
          tool_sha256: 9a0b...
          contract: {name: order_lookup, can_do: [order_lookup]}
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from .._model import Model
from ..contracts import CapabilityContract

__all__ = ["A2AAgentSettings", "A2AServing", "McpAgentSettings", "McpServing", "ProtocolSettings"]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _address(v: str) -> str:
    v = v.strip()
    if not v:
        return ""
    host, sep, port = v.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535 or " " in host:
        raise ValueError(f"{v!r} is not host:port (e.g. 127.0.0.1:8470, port 0 = any)")
    return v


def _http_url(v: str) -> str:
    v = v.strip()
    if v and not re.match(r"^https?://[^/\s]+", v):
        raise ValueError(f"{v!r} is not an http(s) URL")
    return v.rstrip("/")


def _pin(v: str) -> str:
    v = v.strip().lower()
    if v and not _SHA256.match(v):
        raise ValueError("must be 64 hex digits (the SHA-256 'agency protocols' printed)")
    return v


class A2AServing(Model):
    """The gateway as an A2A server."""

    address: str = Field(default="", description="host:port to serve A2A on; empty = off.")
    card_key: Path | None = Field(
        default=None,
        description="The ES256 key that signs the gateway's Agent Card (PEM); default: "
        "keys/a2a-card.pem beside the audit directory, made on first start.",
    )
    public_url: str = Field(
        default="",
        description="The base URL clients reach it at (for the Agent Card); empty = http://address.",
    )

    @field_validator("address")
    @classmethod
    def _check_address(cls, v: str) -> str:
        return _address(v)

    @field_validator("public_url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        return _http_url(v)


class McpServing(Model):
    """The gateway's governed capabilities as an MCP server over Streamable HTTP."""

    address: str = Field(default="", description="host:port to serve MCP on; empty = off.")
    path: str = Field(default="/mcp", pattern=r"^/[A-Za-z0-9/_.-]*$", description="The endpoint path.")

    @field_validator("address")
    @classmethod
    def _check_address(cls, v: str) -> str:
        return _address(v)


class A2AAgentSettings(Model):
    """A remote A2A agent behind a contract."""

    card_url: str = Field(description="The agent's base URL (its card at /.well-known/agent-card.json).")
    contract: CapabilityContract = Field(
        description="What the operator allows it: can_do, cannot_do, SLO ..."
    )
    card_sha256: str = Field(
        default="",
        description="The reviewed card's hash; a different card is not trusted. Empty = pin the card "
        "fetched at start (logged).",
    )
    recheck_seconds: float = Field(
        default=30.0,
        ge=0,
        description="How often the card is fetched again to notice changes (0 = every call).",
    )
    card_keys: Path | None = Field(
        default=None,
        description="The agent's card signing keys (a JWK Set, one JWK or a PEM public key): its card "
        "must carry a JWS signature one of them verifies. None = signatures not checked.",
    )

    @field_validator("card_keys")
    @classmethod
    def _readable_keys(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_file():
            raise ValueError(f"no such file: {v}")
        return v

    @field_validator("card_url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        return _http_url(v)

    @field_validator("card_sha256")
    @classmethod
    def _check_pin(cls, v: str) -> str:
        return _pin(v)


class McpAgentSettings(Model):
    """One tool of an MCP server behind a contract."""

    url: str = Field(default="", description="Streamable HTTP endpoint of the MCP server.")
    command: list[str] = Field(
        default_factory=list, description="Or: the stdio server's command and arguments."
    )
    tool: str = Field(min_length=1, description="The tool's name on that server.")
    contract: CapabilityContract = Field(description="What the operator allows it.")
    tool_sha256: str = Field(
        default="", description="The reviewed tool definition's hash; empty = pin the one listed at start."
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        return _http_url(v)

    @field_validator("tool_sha256")
    @classmethod
    def _check_pin(cls, v: str) -> str:
        return _pin(v)

    @model_validator(mode="after")
    def _one_transport(self) -> McpAgentSettings:
        if bool(self.url) == bool(self.command):
            raise ValueError("url or command: give exactly one (Streamable HTTP or stdio)")
        return self


class ProtocolSettings(Model):
    """A2A and MCP: served by the gateway, and agents that speak them."""

    a2a: A2AServing = Field(default_factory=A2AServing)
    mcp: McpServing = Field(default_factory=McpServing)
    a2a_agents: list[A2AAgentSettings] = Field(default_factory=list)
    mcp_agents: list[McpAgentSettings] = Field(default_factory=list)

    @property
    def needed(self) -> bool:
        """Whether anything here needs the ``protocols`` extra."""
        return bool(self.a2a.address or self.mcp.address or self.a2a_agents or self.mcp_agents)
