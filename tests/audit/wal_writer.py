"""A writer process for the kill -9 test: appends under load, prints each acknowledged index.

Usage: python -m tests.audit.wal_writer ROOT  (or by path). Prints one index per line on
stdout, each only after ``append`` returned, i.e. after the record was fsynced.
"""

from __future__ import annotations

import asyncio
import os
import sys

from middleware.audit.record import AuditRecord
from middleware.audit.wal import WalAuditLog, WalOptions


async def main(root: str, out: int = 1) -> None:
    log = WalAuditLog(root, "n1", options=WalOptions(segment_bytes=32 * 1024, checkpoint_every=50))
    os.write(out, b"open\n")

    async def appender(k: int) -> None:
        n = 0
        while True:
            n += 1
            index = await log.append(AuditRecord(event_type="agent.step", detail={"writer": k, "n": n}))
            os.write(out, b"%d\n" % index)

    await asyncio.gather(*(appender(k) for k in range(32)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
