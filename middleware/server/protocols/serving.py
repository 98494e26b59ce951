"""What ``agency serve`` starts from the ``protocols`` section: the A2A and MCP servers, and the
remote A2A agents and MCP tools registered behind their contracts."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, TextIO

from ...access import Principal
from ...errors import InvalidInput
from ...pipeline import Agency
from ..http_limits import HttpLimits
from ..identity import Identities
from ..protocol_settings import ProtocolSettings
from .common import HttpServer

__all__ = ["Protocols"]

log = logging.getLogger("agency.protocols")


class Protocols:
    """The protocol side of one gateway: start it after the agency is built, stop it before
    the agency is closed.

    Args:
        agency: The governance core.
        settings: The definition's ``protocols`` section.
        token_hashes: The gateway's identities (token file, OIDC issuer; None = tokens off): A2A
            and MCP callers use the same tokens and roles as gRPC.
        out: Where to say what is served (stdout; stderr when stdout is the MCP channel).
        http_limits: The limits of each HTTP listener (docs/operations.md, Security).
    """

    def __init__(
        self,
        agency: Agency,
        settings: ProtocolSettings,
        *,
        token_hashes: Identities | dict[str, Principal] | None,
        out: TextIO | None = None,
        card_key: Path | None = None,
        http_limits: HttpLimits | None = None,
    ) -> None:
        self.card_key = settings.a2a.card_key or card_key
        self.out = out or sys.stdout
        self.http_limits = http_limits or HttpLimits()
        self.agency = agency
        self.settings = settings
        self.token_hashes = token_hashes
        self.servers: list[HttpServer] = []

    async def start(self) -> None:
        """Register the remote agents (cards and tools checked and pinned), then serve."""
        if self.settings.a2a_agents:
            from .a2a_agent import register_a2a_agent

            for i, remote in enumerate(self.settings.a2a_agents):
                agent = await register_a2a_agent(
                    self.agency,
                    remote.card_url,
                    remote.contract,
                    card_sha256=remote.card_sha256,
                    recheck_seconds=remote.recheck_seconds,
                    where=f"protocols.a2a_agents[{i}]",
                    replace=True,  # every replica registers the same contracts from the same file
                    card_keys=_card_keys(remote.card_keys, f"protocols.a2a_agents[{i}].card_keys"),
                )
                print(
                    f"agency: A2A agent {remote.contract.key} at {remote.card_url} (card {agent.pinned})",
                    file=self.out,
                    flush=True,
                )
        if self.settings.mcp_agents:
            from .mcp_agent import register_mcp_tool

            for i, tool in enumerate(self.settings.mcp_agents):
                tool_agent = await register_mcp_tool(
                    self.agency,
                    tool.url or tool.command,
                    tool.tool,
                    tool.contract,
                    tool_sha256=tool.tool_sha256,
                    where=f"protocols.mcp_agents[{i}]",
                    replace=True,
                )
                print(
                    f"agency: MCP tool {tool.tool} as {tool.contract.key} (definition {tool_agent.pinned})",
                    file=self.out,
                    flush=True,
                )
        if self.settings.a2a.address:
            from .a2a_server import build_a2a_app

            a2a = self.settings.a2a
            server = _Deferred(a2a.address, "A2A", self.http_limits)
            url = a2a.public_url or server.url
            signer = None
            if self.card_key is not None:  # the gateway's card is signed (card_signing)
                from .card_signing import CardSigner

                signer = CardSigner.load_or_create(self.card_key)
                print(
                    f"agency: A2A card signed by key {signer.kid} ({self.card_key})",
                    file=self.out,
                    flush=True,
                )
            app = build_a2a_app(self.agency, url=url, token_hashes=self.token_hashes, card_signer=signer)
            await server.serve(app)
            self.servers.append(server.server)
            print(
                f"agency: A2A on {server.url} (Agent Card at {url}/.well-known/agent-card.json)",
                file=self.out,
                flush=True,
            )
        if self.settings.mcp.address:
            from .mcp_server import build_mcp_http_app

            mcp = self.settings.mcp
            server = _Deferred(mcp.address, "MCP", self.http_limits)
            host = mcp.address.rpartition(":")[0].strip("[]")
            app = build_mcp_http_app(self.agency, path=mcp.path, token_hashes=self.token_hashes, host=host)
            await server.serve(app)
            self.servers.append(server.server)
            print(f"agency: MCP (Streamable HTTP) on {server.url}{mcp.path}", file=self.out, flush=True)

    async def stop(self) -> None:
        for server in reversed(self.servers):
            await server.stop()
        self.servers.clear()


def _card_keys(path: Path | None, field: str) -> dict[str, Any] | None:
    """The JWK Set a remote agent's card must be signed with (None: not checked)."""
    if path is None:
        return None
    from .card_signing import load_card_keys

    try:
        return load_card_keys(path)
    except (OSError, ValueError) as exc:
        raise InvalidInput.single(field, str(exc), what="protocols") from None


class _Deferred:
    """A socket bound first (so the URL is known), the app attached after."""

    def __init__(self, address: str, name: str, limits: HttpLimits) -> None:
        self.server = HttpServer(None, address, name=name, limits=limits)
        self.url = self.server.url

    async def serve(self, app: object) -> None:
        self.server.set_app(app)
        await self.server.start()
