"""``agency catalog``: list, show, register, deregister, heartbeat and watch capabilities.

Talks to a running gateway over gRPC (``--address``, the default), or straight to a shared
Redis catalog (``--redis URL``) when no gateway is at hand. There is no "local embedded"
mode: an in-memory catalog lives inside one ``agency serve`` process, so the CLI reaches
it through that process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from ..catalog import Catalog, CatalogEntry, CatalogQuery
from ..contracts import CapabilityContract
from ..errors import InvalidInput, NotFound, Problem
from ..server.settings import ClientTlsConfig
from ._client_tls import add_client_tls_options, client_tls
from ._text import plural
from .exit_codes import NOTHING_FOUND

_EPILOG = """\
Where the catalog is:
  --address HOST:PORT   a running gateway (agency serve), over gRPC; default $AGENCY_ADDRESS
                        or 127.0.0.1:50051
  --redis URL           the shared Redis catalog itself (redis://host:port/db), no gateway
                        needed; --prefix must be the gateways' storage.key_prefix
                        (definition file, or $AGENCY_KEY_PREFIX; default agency:)

A gateway started with a token file (agency serve --auth-tokens) needs --token-file: a file
holding the token alone. Writes (register, deregister, heartbeat) need a token whose line has
the role admin, or the role agent and the contract's name; reads need any known token. For a
TLS gateway add --tls-ca (and --tls-cert/--tls-key for mutual TLS).

Contract files (register) are YAML or JSON: one contract, a list of them, or
{"contracts": [...]}. All are validated first, every problem listed: a file with an invalid
contract registers nothing.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "catalog",
        help="list, show, register and deregister capabilities",
        description="Manage the capability catalog of a running gateway (gRPC) or of a shared Redis catalog.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = argparse.ArgumentParser(add_help=False)
    group = where.add_mutually_exclusive_group()
    group.add_argument(
        "--address",
        help="gateway host:port (gRPC), or several as a comma list (the next when one cannot be "
        "reached); default $AGENCY_ADDRESS or 127.0.0.1:50051",
    )
    group.add_argument("--redis", metavar="URL", help="talk to the shared Redis catalog directly")
    where.add_argument("--prefix", default="agency:", help="Redis key prefix (with --redis; default agency:)")
    where.add_argument(
        "--token-file", type=Path, help="file holding the bearer token for the gateway (the token alone)"
    )
    add_client_tls_options(where)
    where.add_argument("--json", action="store_true", help="print JSON instead of text")
    cmds = p.add_subparsers(dest="catalog_command", metavar="COMMAND", required=True)

    ls = cmds.add_parser(
        "list", parents=[where], help="list capabilities (live ones, unless --include-stale)"
    )
    ls.add_argument("--name", default="", help="only this capability name")
    ls.add_argument("--action", default="", help="only capabilities with this action in can_do")
    ls.add_argument("--tag", action="append", default=[], help="required tag (repeatable)")
    ls.add_argument("--version-range", default="", help="e.g. '^2.1' or '>=1.0.0 <3'")
    ls.add_argument("--max-slo-ms", type=int, default=0, help="largest SLO latency")
    ls.add_argument("--include-stale", action="store_true", help="also list entries that missed their lease")
    ls.set_defaults(handler=_run, op=_list)

    show = cmds.add_parser("show", parents=[where], help="show one capability (name@version)")
    show.add_argument("key", help="name@version")
    show.set_defaults(handler=_run, op=_show)

    reg = cmds.add_parser("register", parents=[where], help="register contracts from a YAML/JSON file")
    reg.add_argument("file", type=Path, help="YAML or JSON file ('-' = stdin)")
    reg.add_argument("--replace", action="store_true", help="replace contracts already registered")
    reg.set_defaults(handler=_run, op=_register)

    dereg = cmds.add_parser("deregister", parents=[where], help="remove a capability (name@version)")
    dereg.add_argument("key", help="name@version")
    dereg.set_defaults(handler=_run, op=_deregister)

    beat = cmds.add_parser("heartbeat", parents=[where], help="renew a capability's lease")
    beat.add_argument("key", help="name@version")
    beat.set_defaults(handler=_run, op=_heartbeat)

    watch = cmds.add_parser(
        "watch", parents=[where], help="print catalog changes as they happen (JSON lines)"
    )
    watch.add_argument("--include-existing", action="store_true", help="first print every current entry")
    watch.add_argument("--count", type=int, default=0, help="stop after this many events (0 = never)")
    watch.set_defaults(handler=_run, op=_watch)


# ------------------------------------------------------------------ targets
class _Target(Protocol):
    async def query(self, query: CatalogQuery) -> list[CatalogEntry]: ...
    async def get(self, key: str) -> CatalogEntry: ...
    async def register(self, contract: CapabilityContract, replace: bool) -> CatalogEntry: ...
    async def deregister(self, key: str) -> None: ...
    async def heartbeat(self, key: str) -> CatalogEntry: ...
    def watch(self, include_existing: bool) -> AsyncIterator[dict[str, Any]]: ...
    async def close(self) -> None: ...


class _CatalogTarget:
    """A catalog backend used directly (the shared Redis catalog)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    async def query(self, query: CatalogQuery) -> list[CatalogEntry]:
        return await self.catalog.query(query)

    async def get(self, key: str) -> CatalogEntry:
        return await self.catalog.get(key)

    async def register(self, contract: CapabilityContract, replace: bool) -> CatalogEntry:
        return await self.catalog.register(contract, replace=replace)

    async def deregister(self, key: str) -> None:
        await self.catalog.deregister(key)

    async def heartbeat(self, key: str) -> CatalogEntry:
        return await self.catalog.heartbeat(key)

    async def watch(self, include_existing: bool) -> AsyncIterator[dict[str, Any]]:
        async with self.catalog.watch() as events:
            if include_existing:
                for entry in await self.catalog.all():
                    yield {"type": "existing", "key": entry.key, "entry": entry.model_dump(mode="json")}
            async for event in events:
                yield event.model_dump(mode="json")

    async def close(self) -> None:
        await self.catalog.close()


class _GrpcTarget:
    """A running gateway's CatalogService, through the public client."""

    def __init__(self, address: str, *, tls: ClientTlsConfig | None = None, token: str | None = None) -> None:
        from ..client import AgencyClient

        self.client = AgencyClient(address, tls=tls, token=token)

    async def query(self, query: CatalogQuery) -> list[CatalogEntry]:
        return await self.client.catalog.query(**query.model_dump())

    async def get(self, key: str) -> CatalogEntry:
        return await self.client.catalog.get(key)

    async def register(self, contract: CapabilityContract, replace: bool) -> CatalogEntry:
        return await self.client.catalog.register(contract, replace=replace)

    async def deregister(self, key: str) -> None:
        await self.client.catalog.deregister(key)

    async def heartbeat(self, key: str) -> CatalogEntry:
        return await self.client.catalog.heartbeat(key)

    async def watch(self, include_existing: bool) -> AsyncIterator[dict[str, Any]]:
        async for change in self.client.catalog.watch(include_existing=include_existing):
            yield {
                "type": change.type,
                "key": change.key,
                "entry": change.entry.model_dump(mode="json") if change.entry is not None else None,
                "at": change.at.isoformat() if change.at else "",
            }

    async def close(self) -> None:
        await self.client.close()


def _target(args: argparse.Namespace) -> _Target:
    if args.redis:
        from ..redis.catalog import RedisCatalog

        return _CatalogTarget(RedisCatalog.from_url(args.redis, prefix=args.prefix + "catalog:"))
    from ..server.settings import ServerConfig, read_token

    tls = client_tls(args)
    token = read_token(args.token_file, field="--token-file") if args.token_file else None
    return _GrpcTarget(args.address or ServerConfig.from_env().address, tls=tls, token=token)


# --------------------------------------------------------------- operations
def _run(args: argparse.Namespace) -> int:
    return asyncio.run(_main(args, sys.stdout))


async def _main(args: argparse.Namespace, out: Any) -> int:
    target = _target(args)
    try:
        return int(await args.op(target, args, out))
    finally:
        await target.close()


async def _list(target: _Target, args: argparse.Namespace, out: Any) -> int:
    query = CatalogQuery.parse(
        {
            "name": args.name,
            "action": args.action,
            "tags": args.tag,
            "version_range": args.version_range,
            "max_slo_latency_ms": args.max_slo_ms,
            "include_stale": args.include_stale,
        },
        what="catalog query",
    )
    entries = await target.query(query)
    q = query
    filtered = bool(q.name or q.action or q.tags or q.version_range or q.max_slo_latency_ms)
    missed = NOTHING_FOUND if filtered and not entries else 0
    if missed:
        print("agency: warning: no capability matches the filters", file=sys.stderr)
    if args.json:
        out.write(json.dumps([_dump(e) for e in entries], indent=2, ensure_ascii=False) + "\n")
        return missed
    rows = [("KEY", "STATE", "SLO_MS", "TAGS", "CAN_DO")]
    for e in entries:
        c = e.contract
        rows.append(
            (
                e.key,
                "stale" if e.stale else "live",
                str(c.slo_latency_ms),
                ",".join(c.tags),
                ",".join(c.can_do),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        out.write("  ".join(x.ljust(w) for x, w in zip(r[:4], widths, strict=True)) + "  " + r[4] + "\n")
    out.write(f"{plural(len(entries), 'capability', 'capabilities')}\n")
    return missed


async def _show(target: _Target, args: argparse.Namespace, out: Any) -> int:
    try:
        entry = await target.get(args.key)
    except NotFound:
        if "@" in args.key:
            raise
        versions = await target.query(CatalogQuery.parse({"name": args.key, "include_stale": True}))
        if not versions:
            raise
        keys = ", ".join(e.key for e in versions)
        found = plural(len(versions), "version")
        raise NotFound(f"give NAME@VERSION: {args.key!r} has {found}: {keys}") from None
    data = _dump(entry)
    if args.json:
        out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        return 0
    import yaml

    out.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return 0


async def _register(target: _Target, args: argparse.Namespace, out: Any) -> int:
    contracts = load_contracts(args.file)
    done = []
    for contract in contracts:
        done.append(await target.register(contract, args.replace))
    if args.json:
        out.write(json.dumps([_dump(e) for e in done], indent=2, ensure_ascii=False) + "\n")
    else:
        for e in done:
            out.write(f"registered {e.key} (revision {e.revision})\n")
    return 0


async def _deregister(target: _Target, args: argparse.Namespace, out: Any) -> int:
    await target.deregister(args.key)
    out.write(json.dumps({"deregistered": args.key}) + "\n" if args.json else f"deregistered {args.key}\n")
    return 0


async def _heartbeat(target: _Target, args: argparse.Namespace, out: Any) -> int:
    entry = await target.heartbeat(args.key)
    out.write(
        json.dumps(_dump(entry)) + "\n" if args.json else f"{entry.key} alive at {entry.last_heartbeat}\n"
    )
    return 0


async def _watch(target: _Target, args: argparse.Namespace, out: Any) -> int:
    seen = 0
    async for event in target.watch(args.include_existing):
        out.write(json.dumps(event, ensure_ascii=False) + "\n")
        out.flush()
        seen += 1
        if args.count and seen >= args.count:
            break
    return 0


def _dump(entry: CatalogEntry) -> dict[str, Any]:
    return {"key": entry.key, **entry.model_dump(mode="json")}


def load_contracts(path: Path) -> list[CapabilityContract]:
    """Contracts from a YAML/JSON file: one, a list, or ``{"contracts": [...]}``.

    Raises:
        InvalidInput: the file cannot be read or parsed, or any contract is invalid
            (every problem of every contract, prefixed by its index).
    """
    import yaml

    try:
        text = sys.stdin.read() if str(path) == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput.single("file", f"cannot read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)  # YAML is a superset of JSON
    except yaml.YAMLError as exc:
        raise InvalidInput.single("file", f"{path} is not YAML/JSON: {exc}") from None
    if isinstance(data, dict) and "contracts" in data:
        data = data["contracts"]
    items = data if isinstance(data, list) else [data]
    contracts, problems = [], []
    for i, item in enumerate(items):
        try:
            contracts.append(CapabilityContract.parse(item, what="capability contract"))
        except InvalidInput as exc:
            where = f"[{i}]." if len(items) > 1 else ""
            problems += [Problem(f"{where}{p.field}", p.reason) for p in exc.problems]
    if problems:
        raise InvalidInput(problems, what=f"contract file {path}")
    return contracts
