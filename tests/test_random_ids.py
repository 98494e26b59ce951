"""Ids come from the OS's random bytes drawn in blocks: their form is unchanged, no two are
the same (across threads, and across a fork: a child does not reuse its parent's block)."""

from __future__ import annotations

import os
import re
import threading

from middleware.smf import new_id, new_trace_id


def test_forms() -> None:
    assert re.fullmatch(r"evt_[0-9a-f]{24}", new_id("evt"))
    assert re.fullmatch(r"[0-9a-f]{32}", new_trace_id())


def test_ids_are_unique_across_blocks_and_threads() -> None:
    drawn: list[list[str]] = [[] for _ in range(4)]

    def draw(into: list[str]) -> None:
        for _ in range(5000):  # many 4 KiB blocks each
            into.append(new_id("t"))
            into.append(new_trace_id())

    threads = [threading.Thread(target=draw, args=(d,)) for d in drawn]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    every = [i for d in drawn for i in d]
    assert len(every) == 40_000
    assert len(set(every)) == len(every)


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    new_id("warm")  # the parent now holds a block with bytes left in it
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first ids, then out at once
        try:
            os.write(write, " ".join(new_id("x") for _ in range(3)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read().split()
    os.waitpid(pid, 0)
    parent = [new_id("x") for _ in range(3)]
    assert len(child) == 3
    assert not set(child) & set(parent)
