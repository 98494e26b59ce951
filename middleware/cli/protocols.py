"""``agency mcp`` and ``agency a2a``: the open agent protocols (needs the ``protocols`` extra).

* ``agency mcp serve``: the governed capabilities as an MCP server on stdin/stdout (what an
  MCP host starts as a subprocess), over an agency built from a definition file or the demo.
* ``agency mcp tool``: list an MCP server's tool and print its definition hash, the pin a
  definition's ``protocols.mcp_agents[].tool_sha256`` takes after review.
* ``agency a2a card``: fetch and check a remote A2A agent's card against a contract, and print
  the ``protocols.a2a_agents`` entry (with the card's hash) for the operator to confirm.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from ..contracts import CapabilityContract
from ..errors import InvalidInput
from ..server.definition import definition_from, load_definition


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = sub.add_parser("mcp", help="MCP: serve governed tools on stdio, pin an MCP server's tool")
    mcp_sub = mcp.add_subparsers(dest="mcp_command", metavar="SUBCOMMAND", required=True)
    serve = mcp_sub.add_parser(
        "serve",
        help="serve the governed capabilities as MCP tools on stdin/stdout",
        description="Serve the governed capabilities as MCP tools on stdin/stdout (an MCP host starts "
        "this as a subprocess). The agency is built in this process from --config (its agents, goals, "
        "storage, audit log) or the reference scenario (--demo); every tool call is a governed task, "
        "audited under the local user's name. For one shared gateway use 'agency serve --mcp' "
        "(Streamable HTTP) instead.",
    )
    serve.add_argument("--config", type=Path, help="agency definition file")
    serve.add_argument("--demo", action="store_true", help="the reference scenario's agents and goal")
    serve.add_argument("--data-dir", type=Path, help="data directory (audit log in DATA_DIR/audit)")
    serve.add_argument("--client", default="", help="the client name to record (default: the local user)")
    serve.set_defaults(handler=_mcp_serve)
    tool = mcp_sub.add_parser(
        "tool",
        help="show an MCP server's tool and its definition hash (the pin for protocols.mcp_agents)",
    )
    where = tool.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="Streamable HTTP endpoint of the MCP server")
    where.add_argument(
        "--command", nargs=argparse.REMAINDER, help="stdio: the server's command and arguments"
    )
    tool.add_argument("--tool", required=True, help="the tool's name")
    tool.set_defaults(handler=_mcp_tool)

    a2a = sub.add_parser("a2a", help="A2A: check a remote agent's card against a contract")
    a2a_sub = a2a.add_subparsers(dest="a2a_command", metavar="SUBCOMMAND", required=True)
    card = a2a_sub.add_parser(
        "card",
        help="fetch and check a remote A2A agent's card; print its protocols.a2a_agents entry",
        description="Fetch URL/.well-known/agent-card.json, check it (an A2A binding this gateway speaks; "
        "every can_do of the contract offered by a skill) and print the definition entry with the card's "
        "SHA-256: paste it under protocols.a2a_agents once reviewed. A changed card is then refused "
        "until the entry is confirmed again.",
    )
    card.add_argument("url", help="the agent's base URL")
    card.add_argument("--contract", type=Path, help="the contract (YAML/JSON) the operator gives it")
    card.set_defaults(handler=_a2a_card)


def _mcp_serve(args: argparse.Namespace) -> int:
    if args.config is not None and args.demo:
        raise InvalidInput.single("--demo", "cannot be combined with --config (the file names the agents)")
    server: dict[str, Any] = {}
    if args.data_dir is not None:
        server["data_dir"] = args.data_dir
    overrides = {"server": server}
    if args.config is not None:
        definition = load_definition(args.config, overrides=overrides)
    else:
        definition = definition_from(overrides=overrides, source="mcp serve")
    return asyncio.run(_serve_stdio(definition, demo=args.demo, client=args.client or getpass.getuser()))


async def _serve_stdio(definition: Any, *, demo: bool, client: str) -> int:
    from ..server.bootstrap import build_agency
    from ..server.protocol_settings import ProtocolSettings
    from ..server.protocols.mcp_server import serve_stdio
    from ..server.protocols.serving import Protocols

    agency = await build_agency(definition)
    try:
        if demo:
            from ..demo import build_demo_agency

            await build_demo_agency(agency)
        # the remote agents of the definition, but no other server: stdout is the MCP channel
        agents = ProtocolSettings(
            a2a_agents=definition.protocols.a2a_agents, mcp_agents=definition.protocols.mcp_agents
        )
        protocols = Protocols(agency, agents, token_hashes=None, out=sys.stderr)
        await protocols.start()
        await serve_stdio(agency, local_client=client)
    finally:
        await agency.close()
        await agency.catalog.close()
    return 0


def _mcp_tool(args: argparse.Namespace) -> int:
    from ..server.protocols.mcp_agent import describe_tool

    tool, digest = asyncio.run(describe_tool(args.url or list(args.command or []), args.tool))
    print(json.dumps({"tool": tool, "tool_sha256": digest}, indent=2, ensure_ascii=False))
    return 0


def _a2a_card(args: argparse.Namespace) -> int:
    from ..server.protocols.a2a_agent import check_card, fetch_card

    card, digest = asyncio.run(fetch_card(args.url))
    entry: dict[str, Any] = {"card_url": args.url.rstrip("/"), "card_sha256": digest}
    if args.contract is not None:
        contract = CapabilityContract.parse(
            yaml.safe_load(args.contract.read_text(encoding="utf-8")), what=str(args.contract)
        )
        check_card(card, contract, card_url=args.url)
        entry["contract"] = contract.model_dump(mode="json", exclude_defaults=True)
    skills = [{"id": s["id"], "tags": s.get("tags", [])} for s in card.get("skills", [])]
    print(f"# {card.get('name', '')} {card.get('version', '')}: skills {json.dumps(skills)}", file=sys.stderr)
    print(yaml.safe_dump({"protocols": {"a2a_agents": [entry]}}, sort_keys=False), end="")
    return 0
