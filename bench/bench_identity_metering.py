"""What identity (OIDC/JWT verification) and metering (usage, prices, budgets) add per task.

Two comparisons, each against its baseline in the same run, variants interleaved:

* **identity** — a one-step task submitted over gRPC to a real server on port 0 with tokens
  required: ``static`` (a bearer token of the token file, a SHA-256 lookup) against ``jwt``
  (an RS256 access token of an OIDC issuer: header, key lookup in the cached JWK Set,
  signature, iss/aud/exp/nbf/iat, claims to role and tenant). The issuer's keys are fetched
  once (a fetch function serving the JWK Set in memory, so no HTTP is timed: in steady state
  the gateway does not fetch them). Client and server share this process.
* **metering** — a two-step task through ``Agency.submit`` (in-memory audit log) whose agents
  report usage: ``none`` (no ``agency.usage``: the usage is ignored) against ``metered``
  (two prices, three budgets with alerts: priced, summed per step and task, per tenant, user,
  goal, agent and model, audited, budgets checked before each step; memory sums) and, with
  ``--redis URL``, ``redis`` (the same with the sums in Redis: one pipeline per usage entry,
  one read per budget check).

Printed: the median over rounds of the CPU time per task of this process (user + system; other
processes on a shared machine do not count) and of the wall-clock p50, with the difference to
the baseline of the same run.

    python -m bench.bench_identity_metering [--tasks 300] [--rounds 5] [--redis redis://127.0.0.1:6379/15]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from joserfc import jwt
from joserfc.jwk import RSAKey

from middleware import Agency, AgencyConfig, AgentReply, MemoryAuditLog
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.access import Principal, Role
from middleware.metering import Metering
from middleware.server.grpc_api import build_server
from middleware.server.identity import Identities
from middleware.server.identity_settings import OidcSettings
from middleware.server.oidc import JwksCache, OidcVerifier
from middleware.smf import utcnow
from middleware.usage import Usage

ISSUER = "https://login.example.com/realms/bench"
STATIC = "static-bench-token-0123456789abcdef"


def identities(key: RSAKey) -> Identities:
    settings = OidcSettings.model_validate(
        {
            "issuer": ISSUER,
            "audience": "agency-gateway",
            "claims": {"name": "sub", "roles": "roles", "tenant": "tenant"},
            "roles": {"agency-client": "client"},
        }
    )
    jwks = {"keys": [key.as_dict(private=False)]}

    async def fetch(url: str) -> dict[str, Any]:
        if url.endswith("openid-configuration"):
            return {"issuer": ISSUER, "jwks_uri": f"{ISSUER}/jwks"}
        return jwks

    static = {
        hashlib.sha256(STATIC.encode()).hexdigest(): Principal(name="bench", role=Role.CLIENT, tenant="acme")
    }
    return Identities(static, verifier=OidcVerifier(settings, keys=JwksCache(ISSUER, fetch=fetch)))


def access_token(key: RSAKey) -> str:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": "agency-gateway",
        "sub": "bench",
        "roles": ["agency-client"],
        "tenant": "acme",
    }
    return jwt.encode({"alg": "RS256", "kid": key.kid}, {**claims, "iat": now, "exp": now + 3600}, key)


async def measure(run: Callable[[], Awaitable[object]], tasks: int) -> tuple[float, float]:
    """(CPU µs per task, wall p50 µs) over ``tasks`` sequential runs."""
    walls = []
    cpu0 = time.process_time()
    for _ in range(tasks):
        t0 = time.perf_counter()
        await run()
        walls.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu0
    return cpu / tasks * 1e6, statistics.median(walls) * 1e6


async def identity_variants(tasks: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    key = RSAKey.generate_key(2048, parameters={"kid": "bench-key"})
    agency = Agency(audit=MemoryAuditLog())
    await agency.register(
        {"name": "echo", "can_do": ["echo"], "tenant": "acme", "output_schema": {"type": "object"}},
        lambda request: {"ok": True},
    )
    ids = identities(key)
    server = build_server(agency, "127.0.0.1:0", token_hashes=ids)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    stub = agency_pb2_grpc.AgencyServiceStub(channel)
    request = agency_pb2.SubmitRequest(text="echo", constraints_json='{"action": "echo"}')
    tokens = {"static": STATIC, "jwt": access_token(key)}

    def call(token: str) -> Callable[[], Awaitable[object]]:
        metadata = (("authorization", f"Bearer {token}"),)

        async def once() -> object:
            reply = await stub.Submit(request, metadata=metadata)
            assert reply.state == "completed", reply.reason
            return reply

        return once

    results: dict[str, list[tuple[float, float]]] = {name: [] for name in tokens}
    try:
        for name in tokens:  # warm-up: connections, the JWK Set fetched once, caches
            await measure(call(tokens[name]), 30)
        for _ in range(rounds):
            for name, token in tokens.items():
                results[name].append(await measure(call(token), tasks))
    finally:
        await channel.close()
        await server.stop(0)
        await ids.aclose()
    return results


USAGE = {
    "prices": {"gpt-bench": {"input": 2.5, "output": 10.0}, "small-*": {"input": 0.1, "output": 0.4}},
    "budgets": [
        {"scope": "tenant", "name": "*", "period": "month", "limit": 1e9, "alerts": [0.5, 0.8]},
        {"scope": "user", "name": "*", "period": "day", "limit_tokens": 10**12},
        {"scope": "agent", "name": "*", "period": "day", "limit": 1e9},
    ],
}


def reporting(model: str) -> Callable[[Any], AgentReply]:
    def agent(request: Any) -> AgentReply:
        return AgentReply(
            output={"ok": True}, usage=[Usage(model=model, input_tokens=1200, output_tokens=300)]
        )

    return agent


async def metering_variants(tasks: int, rounds: int, redis_url: str) -> dict[str, list[tuple[float, float]]]:
    variants: dict[str, Agency] = {}
    meters = []
    for name in ["none", "metered", *(["redis"] if redis_url else [])]:
        config = AgencyConfig.model_validate({"usage": USAGE} if name != "none" else {})
        metering = None
        if name == "redis":
            from middleware.redis.usage_meter import RedisUsageMeter

            meter = RedisUsageMeter.from_url(redis_url, prefix=f"bench:{uuid.uuid4().hex[:8]}:")
            meters.append(meter)
            metering = Metering(config.usage, meter=meter, clock=utcnow)
        agency = Agency(audit=MemoryAuditLog(), config=config, metering=metering)
        await agency.register({"name": "a", "can_do": ["one"]}, reporting("gpt-bench"))
        await agency.register({"name": "b", "can_do": ["two"]}, reporting("small-1"))
        variants[name] = agency
    task = {
        "text": "two steps",
        "user_id": "u_bench",
        "steps": [{"name": "s1", "action": "one"}, {"name": "s2", "action": "two"}],
    }

    def call(agency: Agency) -> Callable[[], Awaitable[object]]:
        async def once() -> object:
            return await agency.submit(task)

        return once

    results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    try:
        for agency in variants.values():
            await measure(call(agency), 30)
        for _ in range(rounds):
            for name, agency in variants.items():
                results[name].append(await measure(call(agency), tasks))
    finally:
        for meter in meters:
            keys = await meter._r.keys(f"{meter._prefix}*")
            if keys:
                await meter._r.delete(*keys)
            await meter.close()
    return results


def report(title: str, results: dict[str, list[tuple[float, float]]], baseline: str) -> None:
    base_cpu = statistics.median(c for c, _ in results[baseline])
    base_wall = statistics.median(w for _, w in results[baseline])
    print(f"\n{title} (µs per task, median of rounds):")
    print(f"  {'variant':<10} {'CPU':>8} {'+CPU':>8} {'wall p50':>10} {'+p50':>8}")
    for name, figures in results.items():
        cpu = statistics.median(c for c, _ in figures)
        wall = statistics.median(w for _, w in figures)
        print(f"  {name:<10} {cpu:8.0f} {cpu - base_cpu:+8.0f} {wall:10.0f} {wall - base_wall:+8.0f}")


async def main_async(args: argparse.Namespace) -> None:
    load = os.getloadavg()[0]
    print(f"{args.tasks} tasks x {args.rounds} rounds; load average {load:.1f}")
    report("identity: one-step task over gRPC", await identity_variants(args.tasks, args.rounds), "static")
    report(
        "metering: two-step task in process",
        await metering_variants(args.tasks, args.rounds, args.redis),
        "none",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--redis", default="", help="also meter with the sums in this Redis (redis://...)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
