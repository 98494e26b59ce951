"""Redis key names and their hash tags: the one place that decides which keys share a slot.

Redis Cluster hashes a key to one of 16384 slots, and refuses a transaction, a script or a
multi-key command whose keys are in different slots (``CROSSSLOT``). A key's slot is taken
from its *hash tag* (the text between the first ``{`` and the next ``}``) when it has one, so
every key here is ``{prefix}{TAG}:rest``: the prefix (``storage.key_prefix``) stays outside
the braces, and all keys an operation touches together carry the same TAG. Standalone Redis
and Sentinel ignore the tags; the names are the same on every deployment.

==========================  =========================================  ==========================
tag                         what lives under it                        why these share a slot
==========================  =========================================  ==========================
``{catalog}``               the whole capability catalog: entries,     register/update/deregister
                            heartbeats, stale set, index sets, the     are WATCH/MULTI over the
                            events channel                             entry, its index sets and
                                                                       the heartbeats; lookups
                                                                       SUNION/SINTER index sets
                                                                       and MGET entries. The
                                                                       catalog is small.
``{stats:AGENT}``           one agent's routing stats hash and its     the outcome script updates
                            outcome list                               both atomically
``{mbox:MAILBOX}``          one mailbox's stream, dead letters,        dead-lettering moves an
                            processed ids and named-message keys       entry stream -> dlq in one
                                                                       MULTI; a named enqueue is
                                                                       one script over stream and
                                                                       name; delete is one DEL
``{ratelimit}``             every rate-limit bucket                    one take charges several
                                                                       buckets (sender, receiver,
                                                                       topic...) all or none, in
                                                                       one script
``{directory}``             the agent directory: records, token        add is one script over
                            index, last seen, look-alike names, each   records, tokens, names and
                            client's agents                            the client's set; put and
                                                                       remove are MULTIs
``{subs}``                  every topic's subscribers and the topic    subscribe adds the member
                            list                                       and the topic in one MULTI
``{esc}``                   escalations, the open list, task -> open   put is one MULTI over the
                            escalation, claims                         escalation, the open list
                                                                       and the task's pointer;
                                                                       the open list is MGET'd
``{console-tasks}``         the console's recent task summaries and    noted in one MULTI, read
                            their list                                 with one MGET
``{quarantine}``            the moderation board and each held         small; a take of a held
                            message's reports                          message and its reports
                                                                       may become one MULTI
``{signin:SHA}``            one console sign-in                        single-key (its own slot)
``{session:ID}``            one conversation state and its lock        the same entity (today
                                                                       single-key operations)
``{task:ID}``               one task: record, lock, event stream       the same entity: the
                                                                       record's scripts and the
                                                                       stream's appends stay in
                                                                       one slot
``{tasks}``                 the list of every task                     single key
``{client:[TENANT/]NAME}``  one client's task list                     single key
``{task-leases}``           lease expiries and owners                  every lease script reads
                                                                       and writes both
``{usage:SCOPE:NAME}``      one entity's spend per period and its      one script adds to all
                            alert marks                                periods of the entity
==========================  =========================================  ==========================

Operations over *several* tags are never atomic: they are non-transactional pipelines (the
cluster client splits them by node) or one command per tag. :func:`scan` walks every primary
of a cluster, so ``clear()`` and ``purge()`` find every key; :func:`delete` removes keys one
slot at a time.

Prefix: anything outside the braces. A prefix that itself contains ``{...}`` puts every key in
one slot (still correct, no longer spread).

Changing these names needs no migration: Redis holds ephemeral state (the audit log is the
record), so keys under the old names expire or can be deleted.

The ``task``/``tasks``/``client``/``task-leases``/``usage``/``session`` helpers are the names
the task, lease, event, usage and session stores use (or move to); the slot test
(``tests/redis/test_hash_slots.py``) runs every store and proves each script, transaction and
multi-key command keeps to one slot.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Iterable
from typing import Any

from redis.crc import key_slot

__all__ = [
    "catalog",
    "client_tasks",
    "console_tasks",
    "delete",
    "directory",
    "escalations",
    "is_cluster",
    "mailbox",
    "quarantine",
    "rate_limits",
    "routing_stats",
    "scan",
    "session",
    "session_lock",
    "sign_in",
    "slot",
    "subscriptions",
    "tagged",
    "task",
    "task_events",
    "task_leases",
    "task_lock",
    "tasks",
    "usage",
    "usage_marks",
]


def tagged(prefix: str, tag: str, rest: str = "") -> str:
    """``{prefix}{tag}`` or ``{prefix}{tag}:rest``: the one key shape every store uses."""
    return f"{prefix}{{{tag}}}:{rest}" if rest else f"{prefix}{{{tag}}}"


def slot(key: str | bytes) -> int:
    """The Redis Cluster slot of ``key`` (its hash tag's, when it has one)."""
    return int(key_slot(key.encode() if isinstance(key, str) else key))


# ---------------------------------------------------------------------------- catalog
class catalog:  # a namespace of key builders, read as ``keys.catalog.entry(...)``
    """The capability catalog: every key under ``{catalog}`` (see the module docstring)."""

    TAG = "catalog"

    @staticmethod
    def entry(prefix: str, key: str) -> str:
        """The entry of ``name@version`` (JSON string with a TTL)."""
        return tagged(prefix, catalog.TAG, f"entry:{key}")

    @staticmethod
    def heartbeats(prefix: str) -> str:
        return tagged(prefix, catalog.TAG, "hb")

    @staticmethod
    def stale(prefix: str) -> str:
        return tagged(prefix, catalog.TAG, "stale")

    @staticmethod
    def index(prefix: str, kind: str, label: str) -> str:
        """The set of entries whose ``kind`` (can, cannot, tag, name) includes ``label``."""
        return tagged(prefix, catalog.TAG, f"idx:{kind}:{label}")

    @staticmethod
    def events(prefix: str) -> str:
        """The pub/sub channel (tagged too: a cluster transaction hashes PUBLISH's channel)."""
        return tagged(prefix, catalog.TAG, "events")


# ----------------------------------------------------------------------- routing stats
def routing_stats(prefix: str, agent: str) -> tuple[str, str]:
    """(stats hash, outcomes list) of one agent: ``{stats:AGENT}``."""
    return tagged(prefix, f"stats:{agent}"), tagged(prefix, f"stats:{agent}", "outcomes")


# ---------------------------------------------------------------------------- messaging
class mailbox:
    """One mailbox's keys: ``{mbox:MAILBOX}``."""

    @staticmethod
    def stream(prefix: str, name: str) -> str:
        return tagged(prefix, f"mbox:{name}", "stream")

    @staticmethod
    def dead_letters(prefix: str, name: str) -> str:
        return tagged(prefix, f"mbox:{name}", "dlq")

    @staticmethod
    def processed(prefix: str, name: str) -> str:
        return tagged(prefix, f"mbox:{name}", "done")

    @staticmethod
    def named(prefix: str, name: str, key_sha256: str) -> str:
        """The live entry id of a named message (``key_sha256``: the name's SHA-256 hex)."""
        return tagged(prefix, f"mbox:{name}", f"key:{key_sha256}")


def rate_limits(prefix: str, bucket: str) -> str:
    """A token bucket (``scope:name``); every bucket is under ``{ratelimit}``."""
    return tagged(prefix, "ratelimit", bucket)


class directory:
    """The agent directory: every key under ``{directory}``."""

    TAG = "directory"

    @staticmethod
    def agents(prefix: str) -> str:
        return tagged(prefix, directory.TAG, "agents")

    @staticmethod
    def tokens(prefix: str) -> str:
        return tagged(prefix, directory.TAG, "tokens")

    @staticmethod
    def seen(prefix: str) -> str:
        return tagged(prefix, directory.TAG, "seen")

    @staticmethod
    def names(prefix: str) -> str:
        """Look-alike name keys -> the agent holding them."""
        return tagged(prefix, directory.TAG, "names")

    @staticmethod
    def of_client(prefix: str, client: str) -> str:
        return tagged(prefix, directory.TAG, f"by:{client}")


class subscriptions:
    """Topic subscriptions: every key under ``{subs}``."""

    TAG = "subs"

    @staticmethod
    def topics(prefix: str) -> str:
        return tagged(prefix, subscriptions.TAG, "topics")

    @staticmethod
    def topic(prefix: str, topic: str) -> str:
        return tagged(prefix, subscriptions.TAG, f"topic:{topic}")


class quarantine:
    """The moderation board: every key under ``{quarantine}``."""

    TAG = "quarantine"

    @staticmethod
    def board(prefix: str) -> str:
        return tagged(prefix, quarantine.TAG, "board")

    @staticmethod
    def reports(prefix: str, message_id: str) -> str:
        return tagged(prefix, quarantine.TAG, f"reports:{message_id}")


# ------------------------------------------------------------------------------ people
class escalations:
    """Escalations: every key under ``{esc}``."""

    TAG = "esc"

    @staticmethod
    def one(prefix: str, esc_id: str) -> str:
        return tagged(prefix, escalations.TAG, f"id:{esc_id}")

    @staticmethod
    def open(prefix: str) -> str:
        return tagged(prefix, escalations.TAG, "open")

    @staticmethod
    def of_task(prefix: str, task_id: str) -> str:
        return tagged(prefix, escalations.TAG, f"task:{task_id}")

    @staticmethod
    def claim(prefix: str, esc_id: str) -> str:
        return tagged(prefix, escalations.TAG, f"claim:{esc_id}")


class console_tasks:
    """The console's recent tasks: every key under ``{console-tasks}``."""

    TAG = "console-tasks"

    @staticmethod
    def listed(prefix: str) -> str:
        return tagged(prefix, console_tasks.TAG, "list")

    @staticmethod
    def summary(prefix: str, task_id: str) -> str:
        return tagged(prefix, console_tasks.TAG, f"task:{task_id}")


def sign_in(prefix: str, sign_in_sha256: str) -> str:
    """One console sign-in: ``{signin:SHA}``."""
    return tagged(prefix, f"signin:{sign_in_sha256}")


# ---------------------------------------------------- tasks, sessions, usage (task_keys)
def task(prefix: str, task_id: str) -> str:
    """A task's record: ``{task:ID}``."""
    return tagged(prefix, f"task:{task_id}")


def task_lock(prefix: str, task_id: str) -> str:
    return tagged(prefix, f"task:{task_id}", "lock")


def task_events(prefix: str, task_id: str) -> str:
    """A task's event stream (same slot as its record)."""
    return tagged(prefix, f"task:{task_id}", "events")


def tasks(prefix: str) -> str:
    """The list of every task: ``{tasks}:all``."""
    return tagged(prefix, "tasks", "all")


def client_tasks(prefix: str, client: str, tenant: str | None = None) -> str:
    """One client's task list (of ``tenant``: two tenants' clients of one name are two)."""
    who = f"{tenant}/{client}" if tenant else client
    return tagged(prefix, f"client:{who}", "tasks")


def task_leases(prefix: str) -> tuple[str, str]:
    """(expiries zset, owners hash): ``{task-leases}``."""
    return tagged(prefix, "task-leases"), tagged(prefix, "task-leases", "owners")


def usage(prefix: str, scope: str, name: str, period: str) -> str:
    """One entity's spend in one period: ``{usage:SCOPE:NAME}:PERIOD``."""
    return tagged(prefix, f"usage:{scope}:{name}", period)


def usage_marks(prefix: str, scope: str, name: str, period: str) -> str:
    return tagged(prefix, f"usage:{scope}:{name}", f"{period}:marks")


def session(prefix: str, session_id: str) -> str:
    return tagged(prefix, f"session:{session_id}")


def session_lock(prefix: str, session_id: str) -> str:
    return tagged(prefix, f"session:{session_id}", "lock")


# --------------------------------------------------------------------- the whole space
def is_cluster(client: Any) -> bool:
    """True for a ``redis.asyncio.cluster.RedisCluster`` (it knows its primaries)."""
    return callable(getattr(client, "get_primaries", None))


async def scan(client: Any, match: str, *, count: int = 1000) -> AsyncIterator[bytes | str]:
    """Every key matching ``match``, on every primary of a cluster (each walked to its end).

    A standalone or Sentinel client has one keyspace; a cluster client's keys are spread over
    its primaries, and a SCAN answers for one node only, so each primary is asked in turn.
    """
    if not is_cluster(client):
        async for key in client.scan_iter(match=match, count=count):
            yield key
        return
    for node in client.get_primaries():
        cursor = 0
        while True:
            # the cluster client answers ({node name: next cursor}, keys)
            cursors, found = await client.scan(cursor=cursor, match=match, count=count, target_nodes=node)
            cursor = int(cursors[node.name])
            for key in found:
                yield key
            if cursor == 0:
                break


async def delete(client: Any, keys: Iterable[bytes | str]) -> int:
    """UNLINK ``keys``, one command per slot (a multi-key UNLINK must stay in one slot).

    Returns how many existed.
    """
    by_slot: dict[int, list[bytes | str]] = defaultdict(list)
    for key in keys:
        by_slot[slot(key)].append(key)
    if not by_slot:
        return 0
    pipe = client.pipeline(transaction=False)
    for group in by_slot.values():
        # the command itself: a cluster pipeline's unlink() is a coroutine that splits by slot
        pipe.execute_command("UNLINK", *group)
    return sum(int(n) for n in await pipe.execute())
