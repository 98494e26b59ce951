"""Property test of the in-memory transport's delivery invariants under random operations."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from middleware.messaging import ManualClock, MemoryMailbox

VT = 10.0

ops = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.integers(1, 3)),
        st.tuples(st.just("receive"), st.sampled_from(["c1", "c2", "c3"]), st.integers(1, 4)),
        st.tuples(st.just("ack"), st.sampled_from(["c1", "c2", "c3"])),
        st.tuples(st.just("advance"), st.sampled_from([1.0, 5.0, 11.0])),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_an_entry_is_never_held_by_two_consumers_and_nothing_is_lost(sequence: list[tuple]) -> None:
    asyncio.run(_scenario(sequence))


async def _scenario(sequence: list[tuple]) -> None:
    clock = ManualClock()
    box = MemoryMailbox(clock=clock)
    enqueued: set[str] = set()
    acked: set[str] = set()
    held: dict[str, tuple[str, float]] = {}  # entry -> (consumer, visible again at)
    counts: dict[str, int] = {}
    for op in sequence:
        if op[0] == "enqueue":
            enqueued.update(await box.enqueue_many("m", [b"x"] * op[1], max_len=1000))
        elif op[0] == "receive":
            _, consumer, count = op
            batch = await box.receive("m", consumer, count=count, visibility_timeout=VT)
            assert len(batch.deliveries) <= count and not batch.lost
            for d in batch.deliveries:
                owner = held.get(d.entry_id)
                assert owner is None or owner[1] <= clock(), "handed out while still invisible"
                assert d.entry_id not in acked
                counts[d.entry_id] = counts.get(d.entry_id, 0) + 1
                assert d.delivery_count == counts[d.entry_id]
                held[d.entry_id] = (consumer, clock() + VT)
        elif op[0] == "ack":
            mine = [e for e, (c, _) in held.items() if c == op[1] and e not in acked]
            await box.ack("m", mine)
            acked.update(mine)
        else:
            clock.advance(op[1])
        assert await box.size("m") == len(enqueued - acked)
    # Everything not acknowledged is still delivered eventually.
    clock.advance(VT + 1)
    rest = await box.receive("m", "final", count=1000, visibility_timeout=VT)
    assert {d.entry_id for d in rest.deliveries} == enqueued - acked
