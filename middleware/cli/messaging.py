"""``agency messaging``: make an agent's credentials, enroll it, send, pull and acknowledge.

- ``keygen NAME...`` writes ``NAME.key`` (Ed25519, PEM) and ``NAME.token`` under ``--dir``
  (mode 0600) and prints the definition-file entry (public key and token hash, no secret).
- ``enroll NAME... --config FILE`` adds those entries to ``messaging.agents`` of the definition
  file (creating the file when it does not exist); a running gateway reads it at start-up.
- ``send``, ``pull``, ``ack`` and ``subscribe`` call a gateway's ``MessageService`` as the
  agent ``--as NAME`` with the credentials in ``--dir`` (see
  :mod:`middleware.client.messaging`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import AlreadyExists, InvalidInput, Problem
from .exit_codes import CHECK_FAILED

_DIR_HELP = (
    "directory of the agents' credentials (NAME.key, NAME.token); default $AGENCY_AGENTS_DIR or agents"
)

_EPILOG = """\
A first conversation (the gateway listens on $AGENCY_ADDRESS, default 127.0.0.1:50051):

  agency messaging keygen alice bob
  agency messaging enroll alice bob --config messaging.yaml
  agency serve --config messaging.yaml &
  agency messaging send --as alice bob '{"task": "review", "pr": 7}'
  agency messaging pull --as bob --wait 5 --ack

The credential files are secrets (the key signs, the token authenticates): keep them with the
agent. The definition file holds only the public key and the token's SHA-256.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "messaging",
        help="agent credentials, enrollment, and send / pull / ack through a gateway",
        description="Agent-to-agent messaging from the command line.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmds = p.add_subparsers(dest="messaging_command", metavar="SUBCOMMAND", required=True)

    creds = argparse.ArgumentParser(add_help=False)
    creds.add_argument("--dir", type=Path, default=None, help=_DIR_HELP)

    keygen = cmds.add_parser("keygen", parents=[creds], help="make agents' key pairs and tokens")
    keygen.add_argument("names", nargs="+", metavar="NAME")
    keygen.add_argument("--force", action="store_true", help="replace existing credentials")
    keygen.set_defaults(handler=_keygen)

    enroll = cmds.add_parser(
        "enroll", parents=[creds], help="add agents to a definition file's messaging.agents"
    )
    enroll.add_argument("names", nargs="+", metavar="NAME")
    enroll.add_argument("--config", type=Path, required=True, help="the definition file (created if absent)")
    enroll.add_argument("--description", default="", help="what the agents do (shown to senders)")
    enroll.set_defaults(handler=_enroll)

    from ._client_tls import add_client_tls_options

    calls_no_agent = argparse.ArgumentParser(add_help=False, parents=[creds])
    calls_no_agent.add_argument(
        "--address", help="gateway host:port; default $AGENCY_ADDRESS or 127.0.0.1:50051"
    )
    calls_no_agent.add_argument(
        "--client-token-file", type=Path, help="the gateway's client token, when it requires one"
    )
    calls_no_agent.add_argument("--timeout", type=float, default=10.0, help="seconds per call (default 10)")
    add_client_tls_options(calls_no_agent)
    calls = argparse.ArgumentParser(add_help=False, parents=[calls_no_agent])
    calls.add_argument("--as", dest="agent", required=True, metavar="NAME", help="the agent making the call")

    send = cmds.add_parser(
        "send",
        parents=[calls],
        help="send a message (direct, --topic or --broadcast)",
        description="Send a message; prints its id, the mailboxes it reached and, when moderation held it "
        'for a moderator, why ("quarantined"; exit code 1: it reached nobody).',
    )
    send.add_argument(
        "receiver", nargs="?", default="", help="the receiving agent (not with --topic/--broadcast)"
    )
    send.add_argument("content", help="the content: JSON if it parses as JSON, else text")
    where = send.add_mutually_exclusive_group()
    where.add_argument("--topic", default="", help="publish to this domain.action topic")
    where.add_argument("--broadcast", action="store_true", help="a copy to every other agent")
    send.add_argument("--ttl", type=float, help="seconds the message lives (default: the gateway's)")
    send.add_argument("--wake", action="store_true", help="trigger_turn: wake the receiver")
    send.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="a tool parameter")
    send.add_argument(
        "--content-type",
        default="application/json",
        help="MIME type of the content (default application/json)",
    )
    send.add_argument("--correlation-id", default="", help="the conversation it belongs to")
    send.set_defaults(handler=_send)

    pull = cmds.add_parser("pull", parents=[calls], help="print waiting messages as JSON lines")
    pull.add_argument("--max", type=int, default=10, help="at most this many (1..1000, default 10)")
    pull.add_argument("--wait", type=float, default=0.0, help="seconds to wait for one (<= 60)")
    pull.add_argument("--ack", action="store_true", help="acknowledge them once printed")
    pull.set_defaults(handler=_pull)

    ack = cmds.add_parser("ack", parents=[calls], help="acknowledge messages by receipt")
    ack.add_argument("receipts", nargs="+", metavar="RECEIPT")
    ack.set_defaults(handler=_ack)

    reg = cmds.add_parser(
        "register",
        parents=[calls_no_agent],
        help="register an agent with a gateway (messaging.registration.mode open/admin/approval)",
    )
    reg.add_argument("name", metavar="NAME")
    reg.add_argument("--description", default="", help="what it can do (FindAgents searches it)")
    reg.add_argument(
        "--publishes", action="append", default=[], metavar="TOPIC", help="a topic it publishes to"
    )
    reg.add_argument(
        "--subscribes", action="append", default=[], metavar="TOPIC", help="a topic to subscribe to"
    )
    reg.set_defaults(handler=_register)

    find = cmds.add_parser("find", parents=[calls], help="find agents by capability words and/or topic")
    find.add_argument("capability", nargs="*", help="words that must appear in the name or description")
    find.add_argument("--topic", default="", help="that publish or subscribe to this topic")
    find.set_defaults(handler=_find)

    subscribe = cmds.add_parser(
        "subscribe", parents=[calls], help="subscribe to topics and print messages as they come"
    )
    subscribe.add_argument("topics", nargs="*", metavar="TOPIC")
    subscribe.add_argument("--count", type=int, default=0, help="stop after this many (0: never)")
    subscribe.add_argument("--ack", action="store_true", help="acknowledge each once printed")
    subscribe.set_defaults(handler=_subscribe)


def _dir(args: argparse.Namespace) -> Path:
    return Path(args.dir or os.environ.get("AGENCY_AGENTS_DIR") or "agents")


def _keygen(args: argparse.Namespace) -> int:
    from ..client.messaging import AgentCredentials
    from ..messaging.identity import AGENT_NAME_PATTERN

    folder = _dir(args)
    for name in args.names:
        if not AGENT_NAME_PATTERN.match(name):
            raise InvalidInput.single(
                name, "not an agent name: 1-128 letters, digits and _ . : - (not first)"
            )
    for name in args.names:
        creds = AgentCredentials.generate(name)
        creds.save(folder, overwrite=args.force)
        entry = creds.enrollment()
        print(
            f"{name}: wrote {folder / (name + '.key')} and {folder / (name + '.token')} (secret: keep them)"
        )
        print(
            f"  - {{name: {name}, public_key: {entry['public_key']}, token_sha256: {entry['token_sha256']}}}"
        )
    return 0


def _enroll(args: argparse.Namespace) -> int:
    import yaml

    from ..client.messaging import AgentCredentials

    folder = _dir(args)
    entries = [AgentCredentials.load(folder, name).enrollment(args.description) for name in args.names]
    path: Path = args.config
    data: dict[str, Any] = {"version": 1}
    if path.exists():
        loaded = yaml.safe_load(path.read_text()) or {}
        if not isinstance(loaded, dict):
            raise InvalidInput.single(str(path), "not a definition file (a mapping)")
        data = loaded
    messaging = data.setdefault("messaging", {}) or {}
    data["messaging"] = messaging
    agents = messaging.setdefault("agents", []) or []
    messaging["agents"] = agents
    taken = {a.get("name") for a in agents if isinstance(a, dict)}
    clashes = [e["name"] for e in entries if e["name"] in taken]
    if clashes:
        raise AlreadyExists(f"{path}: messaging.agents already has {', '.join(clashes)}")
    agents.extend(entries)
    from ..server.definition import AgencyDefinition

    AgencyDefinition.parse(data, what=f"definition {path}")  # refuse to write a file serve would refuse
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    print(f"{path}: enrolled {', '.join(args.names)} (restart the gateway to load them)")
    return 0


def _client(args: argparse.Namespace) -> Any:
    from ..client.messaging import AgentCredentials, MessagingClient
    from ._client_tls import client_tls

    token = args.client_token_file.read_text().strip() if args.client_token_file else None
    return MessagingClient(
        AgentCredentials.load(_dir(args), args.agent),
        args.address,
        tls=client_tls(args),
        client_token=token,
        timeout=args.timeout,
    )


def _content(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _params(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    problems = []
    for i, pair in enumerate(pairs):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            problems.append(Problem(f"--param[{i}]", f"{pair!r} is not KEY=VALUE"))
            continue
        out[key] = _content(value)
    if problems:
        raise InvalidInput(problems, what="options")
    return out


def _send(args: argparse.Namespace) -> int:
    async def run() -> Any:
        async with _client(args) as client:
            content = _content(args.content)
            envelope = {"content_type": args.content_type, "correlation_id": args.correlation_id}
            if args.topic:
                return await client.publish(
                    args.topic, content, ttl=args.ttl, trigger_turn=args.wake, **envelope
                )
            if args.broadcast:
                return await client.broadcast(content, ttl=args.ttl, **envelope)
            if not args.receiver:
                raise InvalidInput.single("receiver", "required (or --topic / --broadcast)")
            return await client.send(
                args.receiver,
                content,
                ttl=args.ttl,
                trigger_turn=args.wake,
                params=_params(args.param),
                **envelope,
            )

    result = asyncio.run(run())
    print(
        json.dumps(
            {
                "message_id": result.message_id,
                "recipients": list(result.recipients),
                "message_hash": result.message_hash,
                "trace": result.trace_link,
                "quarantined": result.quarantined,
            }
        )
    )
    if result.quarantined:  # held for a moderator, delivered to nobody (not "no subscribers")
        print(
            f"agency: message {result.message_id} held by moderation: {result.quarantined}", file=sys.stderr
        )
        return CHECK_FAILED
    return 0


def _line(received: Any) -> str:
    msg = received.message
    return json.dumps(
        {
            "receipt": received.receipt,
            "message_id": msg.message_id,
            "from": msg.sender,
            "to": msg.receiver,
            "kind": received.kind,
            "topic": received.topic,
            "content_type": received.content_type,
            "content": msg.content,
            "correlation_id": received.correlation_id,
            "message_hash": received.message_hash,
            "params": dict(received.params),
            "trigger_turn": received.trigger_turn,
            "delivery_count": received.delivery_count,
            "trace_id": msg.trace_id,
            "created_at": msg.created_at.isoformat(),
        },
        ensure_ascii=False,
    )


def _pull(args: argparse.Namespace) -> int:
    async def run() -> int:
        async with _client(args) as client:
            got = await client.pull(max_messages=args.max, wait=args.wait)
            for received in got:
                print(_line(received))
            sys.stdout.flush()
            if args.ack and got:
                await client.ack(got)
            return len(got)

    asyncio.run(run())
    return 0


def _ack(args: argparse.Namespace) -> int:
    async def run() -> int:
        async with _client(args) as client:
            return int(await client.ack(args.receipts))

    print(json.dumps({"acknowledged": asyncio.run(run())}))
    return 0


def _register(args: argparse.Namespace) -> int:
    from ..client.messaging import register_agent
    from ._client_tls import client_tls

    folder = _dir(args)
    if (folder / f"{args.name}.key").exists() or (folder / f"{args.name}.token").exists():
        raise AlreadyExists(f"credentials of {args.name!r} already exist in {folder}")
    token = args.client_token_file.read_text().strip() if args.client_token_file else None
    creds, info = asyncio.run(
        register_agent(
            args.name,
            args.address,
            description=args.description,
            publishes=args.publishes,
            subscribes=args.subscribes,
            tls=client_tls(args),
            client_token=token,
            timeout=args.timeout,
        )
    )
    creds.save(folder)
    print(f"{info.name}: registered ({info.status}); key and token in {folder} (secret: keep them)")
    return 0


def _find(args: argparse.Namespace) -> int:
    async def run() -> Any:
        async with _client(args) as client:
            return await client.find_agents(" ".join(args.capability), topic=args.topic)

    for info in asyncio.run(run()):
        print(
            json.dumps(
                {
                    "name": info.name,
                    "description": info.description,
                    "publishes": list(info.publishes),
                    "subscribes": list(info.subscribes),
                    "status": info.status,
                    "last_seen": info.last_seen,
                },
                ensure_ascii=False,
            )
        )
    return 0


def _subscribe(args: argparse.Namespace) -> int:
    async def run() -> None:
        async with _client(args) as client:
            seen = 0
            async for received in client.subscribe(args.topics):
                print(_line(received), flush=True)
                if args.ack:
                    await client.ack([received])
                seen += 1
                if args.count and seen >= args.count:
                    return

    asyncio.run(run())
    return 0
