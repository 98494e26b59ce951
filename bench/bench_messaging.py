"""Messaging throughput and latency: send -> deliver -> ack.

Run: ``python -m bench.bench_messaging [--redis-url URL] [--messages N]``

1. The in-memory transport on one core (target: >= 50,000 messages/s).
2. The Redis Streams transport against raw redis-py ``XADD`` (pipelined) +
   ``XREADGROUP`` + ``XACK`` with the same batch sizes, interleaved in the same run
   (target: >= 50% of raw throughput).
3. For information: the whole post office path (token, SMF validation, Ed25519
   sign + verify, audit record per message, dedupe check) over both transports.
4. Webhook delivery throughput: messages waiting in a mailbox pushed by the webhook
   dispatcher (pull, HMAC-signed POST over HTTP/1.1 keep-alive, ack) to a minimal HTTP
   receiver running in its own process (so its cost is not counted here).

Redis keys live under a unique ``bench:`` prefix and are deleted at the end (no SCAN).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis.asyncio as aioredis

from middleware.audit import MemoryAuditLog
from middleware.messaging import (
    MemoryMailbox,
    PostOffice,
    PostOfficeConfig,
    RedisMailbox,
    generate_key,
    public_key_b64,
    sign_message,
)
from middleware.messaging.mailbox import MailboxTransport
from middleware.smf import SMFMessage

PAYLOAD = b'{"message":{"sender":"bench-a","receiver":"bench-b","content":"' + b"x" * 200 + b'"}}'
BIG = 10**9


class Result:
    """Throughput (wall clock, and per CPU-second of this process) and per-cycle latency."""

    def __init__(self, name: str, messages: int, seconds: float, cpu: float, cycles: list[float]) -> None:
        self.name = name
        self.rate = messages / seconds
        self.cpu_rate = messages / cpu if cpu > 0 else float("inf")
        self.p50 = statistics.median(cycles) * 1000
        self.p99 = sorted(cycles)[max(0, int(len(cycles) * 0.99) - 1)] * 1000

    def row(self, baseline: Result | None = None) -> str:
        ratio = f"{self.rate / baseline.rate:6.0%}" if baseline else "      "
        return (
            f"  {self.name:<30} {self.rate:>9,.0f} msg/s {ratio} (cpu {self.cpu_rate:>9,.0f}/s)"
            f"  p50 {self.p50:7.3f} ms  p99 {self.p99:7.3f} ms"
        )


async def run_cycles(name: str, total: int, batch: int, cycle: Callable[[], Awaitable[None]]) -> Result:
    cycles: list[float] = []
    rounds = max(1, total // batch)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        t0 = time.perf_counter()
        await cycle()
        cycles.append(time.perf_counter() - t0)
    return Result(name, rounds * batch, time.perf_counter() - start, time.process_time() - cpu, cycles)


def transport_cycle(t: MailboxTransport, box: str, batch: int) -> Callable[[], Awaitable[None]]:
    items = [PAYLOAD] * batch

    async def cycle() -> None:
        await t.enqueue_many(box, items, max_len=BIG)
        got = await t.receive(box, "c1", count=batch, visibility_timeout=30)
        await t.ack(box, [d.entry_id for d in got.deliveries])
        assert len(got.deliveries) == batch, (len(got.deliveries), batch)

    return cycle


def raw_cycle(r: aioredis.Redis, key: str, batch: int) -> Callable[[], Awaitable[None]]:
    async def cycle() -> None:
        pipe = r.pipeline(transaction=False)
        for _ in range(batch):
            pipe.xadd(key, {"d": PAYLOAD})
        await pipe.execute()
        resp = await r.xreadgroup("g", "c1", {key: ">"}, count=batch)
        ids = [entry_id for _, entries in resp for entry_id, _ in entries]
        await r.xack(key, "g", *ids)
        assert len(ids) == batch

    return cycle


async def bench_memory(total: int) -> list[Result]:
    out = []
    for batch in (1, 10, 100):
        t = MemoryMailbox()
        out.append(
            await run_cycles(f"memory transport, batch {batch}", total, batch, transport_cycle(t, "b", batch))
        )
    return out


async def bench_redis(url: str, total: int) -> list[tuple[Result, Result]]:
    r = aioredis.Redis.from_url(url)
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    pairs = []
    t = RedisMailbox(r, prefix=prefix)
    try:
        for batch in (1, 10, 100):
            raw_key = f"{prefix}raw:{batch}"
            await r.xgroup_create(raw_key, "g", id="0", mkstream=True)
            raw = raw_cycle(r, raw_key, batch)
            ours = transport_cycle(t, f"b{batch}", batch)
            await raw()  # warm both paths (script load, group creation)
            await ours()
            raw_results, our_results = [], []
            for _ in range(3):  # interleave, so both see the same machine
                raw_results.append(await run_cycles("raw", total // 3, batch, raw))
                our_results.append(await run_cycles("ours", total // 3, batch, ours))
            best_raw = max(raw_results, key=lambda x: x.rate)
            best_ours = max(our_results, key=lambda x: x.rate)
            best_raw.name = f"raw redis-py, batch {batch}"
            best_ours.name = f"RedisMailbox, batch {batch}"
            pairs.append((best_raw, best_ours))
    finally:
        await t.purge()
        await r.delete(*[f"{prefix}raw:{batch}" for batch in (1, 10, 100)])
        await r.aclose()
    return pairs


async def bench_post_office(transport: MailboxTransport, name: str, total: int) -> Result:
    po = PostOffice(transport, audit=MemoryAuditLog(), config=PostOfficeConfig(mailbox_max=BIG))
    ka, kb = generate_key(), generate_key()
    ta = await po.register("bench-a", public_key_b64(ka))
    tb = await po.register("bench-b", public_key_b64(kb))

    async def cycle() -> None:
        msg = SMFMessage.parse(
            {
                "sender": "bench-a",
                "receiver": "bench-b",
                "content": "x" * 200,
                "metadata": {
                    "provenance": {"source": "bench-a", "reliability_score": 1.0},
                    "freshness_ttl": 60,
                    "confidence_score": 1.0,
                    "intention_trace": ["GOAL_BENCH"],
                },
            }
        )
        await po.send(ta, msg, signature=sign_message(ka, msg))
        got = await po.pull(tb, max_messages=1)
        await po.ack(tb, [got[0].receipt])

    await cycle()
    return await run_cycles(name, total, 1, cycle)


async def _serve_webhook_receiver(port: int) -> None:
    """A minimal HTTP/1.1 receiver: answers every POST 204, keeps connections open."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


async def bench_webhooks(total: int, concurrency: int) -> Result:
    from middleware.messaging.webhooks import WebhookDispatcher, WebhookSettings

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    receiver = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.bench_messaging", "--serve-webhook", str(port)
    )
    po = PostOffice(audit=MemoryAuditLog(), config=PostOfficeConfig(mailbox_max=BIG))
    ka = generate_key()
    ta = await po.register("bench-a", public_key_b64(ka))
    await po.register("bench-b", public_key_b64(generate_key()))
    for _ in range(total):
        msg = SMFMessage.parse(
            {
                "sender": "bench-a",
                "receiver": "bench-b",
                "content": "x" * 200,
                "metadata": {
                    "provenance": {"source": "bench-a", "reliability_score": 1.0},
                    "freshness_ttl": 600,
                    "confidence_score": 1.0,
                    "intention_trace": ["GOAL_BENCH"],
                },
            }
        )
        await po.send(ta, msg, signature=sign_message(ka, msg))
    with tempfile.TemporaryDirectory() as tmp:
        secret = Path(tmp) / "secret"
        secret.write_text("bench-secret")
        hook = WebhookSettings(
            url=f"http://127.0.0.1:{port}/hook",
            secret_file=secret,
            concurrency=concurrency,
            initial_backoff=0.01,
        )
        for _ in range(200):  # the receiver process is starting
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            await asyncio.sleep(0.05)
        all_delivered = asyncio.Event()
        delivered = 0

        def on_attempt(agent: str, outcome: str) -> None:
            nonlocal delivered
            delivered += outcome == "delivered"
            if delivered >= total:
                all_delivered.set()

        dispatcher = WebhookDispatcher(po, {"bench-b": [hook]}, poll=0.05, on_attempt=on_attempt)
        started, cpu0 = time.perf_counter(), time.process_time()
        await dispatcher.start()
        try:
            await asyncio.wait_for(all_delivered.wait(), 600)
        finally:
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu0
            await dispatcher.stop()
            receiver.terminate()
            await receiver.wait()
    per = elapsed / total
    return Result(f"webhooks, {concurrency} in flight", total, elapsed, cpu, [per] * 2)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--messages", type=int, default=100_000, help="messages per in-memory measurement")
    parser.add_argument(
        "--redis-messages", type=int, default=6_000, help="messages per Redis measurement (raw and ours each)"
    )
    parser.add_argument("--webhook-messages", type=int, default=3_000, help="messages pushed to webhooks")
    parser.add_argument("--serve-webhook", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_webhook:  # the receiver process of the webhook measurement
        await _serve_webhook_receiver(args.serve_webhook)
        return

    print("send -> deliver -> ack, one asyncio loop (one core); latency = one batch cycle;")
    print("cpu = messages per CPU-second of this process (robust when other processes share the cores)")
    print("\n[in-memory transport] target >= 50,000 msg/s")
    memory = await bench_memory(args.messages)
    for res in memory:
        print(res.row())
    print("\n[Redis Streams transport vs raw redis-py, same batch sizes] target >= 50% of raw")
    redis_pairs = await bench_redis(args.redis_url, args.redis_messages)
    for raw, ours in redis_pairs:
        print(raw.row())
        print(ours.row(raw))
    print("\n[full post office path: auth, SMF validation, Ed25519 sign+verify, audit, dedupe] batch 1")
    print((await bench_post_office(MemoryMailbox(), "PostOffice over memory", args.redis_messages)).row())
    r = aioredis.Redis.from_url(args.redis_url)
    redis_box = RedisMailbox(r, prefix=f"bench:{uuid.uuid4().hex[:8]}:")
    try:
        print((await bench_post_office(redis_box, "PostOffice over Redis", args.redis_messages // 3)).row())
    finally:
        await redis_box.purge()
        await r.aclose()

    print("\n[webhook delivery: pull, HMAC-signed POST, ack; receiver in another process] for information")
    for concurrency in (1, 16):
        print((await bench_webhooks(args.webhook_messages, concurrency)).row().split("  p50")[0])

    worst_memory = min(res.cpu_rate for res in memory)
    ratios = [ours.rate / raw.rate for raw, ours in redis_pairs]
    print(
        f"\nverdict: memory (any batch, per CPU-second) {worst_memory:,.0f} msg/s "
        f"{'OK' if worst_memory >= 50_000 else 'BELOW TARGET'}; "
        f"redis/raw ratios {', '.join(f'{x:.0%}' for x in ratios)} "
        f"{'OK' if min(ratios) >= 0.5 else 'BELOW TARGET'}"
    )


if __name__ == "__main__":
    asyncio.run(main())
