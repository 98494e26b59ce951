"""Governance over the open agent protocols: A2A and MCP, with their official Python SDKs.

Every governed capability is reachable through both protocols, and agents that speak them
can sit behind contracts, without giving up any guarantee of the pipeline:

* :mod:`.a2a_server`: the gateway as an A2A server (JSON-RPC and HTTP+JSON bindings, the
  Agent Card at the well-known path, skills from the registered contracts); every message
  is a task through :meth:`middleware.Agency.submit`, follow-up messages resume it.
* :mod:`.a2a_agent`: a remote A2A agent behind a contract (card fetched, checked, pinned
  by hash; its failures mapped onto the twelve failure types).
* :mod:`.mcp_server`: governed capabilities as MCP tools (stdio and Streamable HTTP).
* :mod:`.mcp_agent`: an MCP server's tools as agents behind contracts (tool definitions
  pinned by hash).

The core never imports this package. Needs the optional extra:
``pip install 'agency-middleware[protocols]'``. See docs/protocols.md.
"""

from __future__ import annotations

try:
    import a2a  # noqa: F401
    import mcp  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "middleware.server.protocols needs the A2A and MCP SDKs, which are not installed. "
        "Install the extra: pip install 'agency-middleware[protocols]'"
    ) from exc
