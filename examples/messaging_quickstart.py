"""Two agents talk through a gateway's post office, with throwaway credentials.

Runs as shipped (``python examples/messaging_quickstart.py``): it makes keys and tokens for
``alice`` and ``bob``, enrolls them in an agency definition (public keys and token hashes
only, as a definition file would hold them), serves ``MessageService`` on a free local port,
then ``alice`` sends a signed message with the public client, ``bob`` pulls and acknowledges
it, and both see what a refusal looks like (an error of the library's own tree).
"""

from __future__ import annotations

import asyncio

from middleware import Agency
from middleware.audit import MemoryAuditLog
from middleware.client.messaging import AgentCredentials, MessagingClient
from middleware.errors import InvalidInput, NotFound
from middleware.server.bootstrap import build_post_office
from middleware.server.definition import AgencyDefinition
from middleware.server.grpc_api import build_server


async def main() -> None:
    alice, bob = AgentCredentials.generate("alice"), AgentCredentials.generate("bob")
    definition = AgencyDefinition.parse(
        {
            "version": 1,
            "messaging": {
                "agents": [alice.enrollment("Asks for reviews"), bob.enrollment("Reviews code")],
                "flows": ["alice > bob"],
            },
        }
    )
    audit = MemoryAuditLog()
    post_office = await build_post_office(definition, audit=audit)
    server = build_server(Agency(audit=audit), "127.0.0.1:0", post_office=post_office)
    await server.start()
    address = f"127.0.0.1:{server.port}"
    try:
        async with MessagingClient(alice, address) as a, MessagingClient(bob, address) as b:
            sent = await a.send("bob", {"task": "review", "pr": 7}, params={"priority": "high"})
            print(f"alice sent {sent.message_id} to {', '.join(sent.recipients)}")

            for received in await b.pull(wait=5):
                msg = received.message
                print(f"bob got {msg.content} from {msg.sender} (params {dict(received.params)})")
                await b.ack([received])

            try:
                await a.send("carol", "hello?")
            except NotFound as exc:
                print(f"refused as expected: {exc.reason}: {exc}")
            try:
                await a.send("bob", "stale news", freshness_ttl=0)
            except InvalidInput as exc:
                print(f"refused as expected: {exc.reason} on {exc.field}")
    finally:
        await server.stop(0)
        await post_office.transport.close()


if __name__ == "__main__":
    asyncio.run(main())
