"""Agent-to-agent messaging: communication flows, send vs handoff vs post, mailboxes.

- :mod:`.flows` — who may message whom, and with which tool (``a > b > c``).
- :mod:`.runtime` — send_message sub-calls, handoffs, mailbox posts with
  notify-or-wake, child runs with a completion watcher; :mod:`.conversation` —
  user turns and who answers them.
- :mod:`.post_office` — authenticated, signed, audited point-to-point, topic and
  broadcast delivery; at-least-once with ack, dedupe, TTL, dead letters.
- :mod:`.mailbox` — the transport interface; :mod:`.memory_mailbox` (embedded
  default) and :mod:`middleware.redis.mailbox` (Redis Streams with consumer groups).
- :mod:`.identity` — tokens, Ed25519 signatures, topic ACLs, a per-agent rate limit;
  :mod:`.limits` — rate limits per sender, recipient and topic (shared on Redis).
"""

from .._lazy import lazy_exports
from .clock import Clock, ManualClock, system_clock
from .conversation import Conversation
from .flows import AgentHandle, Edge, Flows, Handoff, SendMessage, ToolCall, ToolSpec
from .identity import (
    AclSettings,
    IdentityRegistry,
    RateLimiter,
    Registration,
    SendOptions,
    TopicACL,
    TopicRule,
    generate_key,
    public_key_b64,
    sign_message,
    signing_bytes,
)
from .limits import LimitRule, MemoryBuckets, RateLimits, RateLimitSettings
from .mailbox import Batch, DeadLetter, Delivery, MailboxTransport
from .memory_mailbox import MemoryMailbox
from .post_office import (
    BROADCAST,
    BROADCAST_TOPIC,
    DeadMessage,
    Envelope,
    PostOffice,
    PostOfficeConfig,
    Received,
    SendResult,
)
from .runtime import ChildResult, ChildRun, Runtime, SubAgentEvent, Turn, TurnContext
from .subscriptions import MemorySubscriptions, SubscriptionStore

__all__ = [
    "BROADCAST",
    "BROADCAST_TOPIC",
    "AclSettings",
    "AgentHandle",
    "Batch",
    "ChildResult",
    "ChildRun",
    "Clock",
    "Conversation",
    "DeadLetter",
    "DeadMessage",
    "Delivery",
    "Edge",
    "Envelope",
    "Flows",
    "Handoff",
    "IdentityRegistry",
    "LimitRule",
    "MailboxTransport",
    "ManualClock",
    "MemoryBuckets",
    "MemoryMailbox",
    "MemorySubscriptions",
    "PostOffice",
    "PostOfficeConfig",
    "RateLimitSettings",
    "RateLimiter",
    "RateLimits",
    "Received",
    "RedisBuckets",
    "RedisMailbox",
    "RedisSubscriptions",
    "Registration",
    "Runtime",
    "SendMessage",
    "SendOptions",
    "SendResult",
    "SubAgentEvent",
    "SubscriptionStore",
    "ToolCall",
    "ToolSpec",
    "TopicACL",
    "TopicRule",
    "Turn",
    "TurnContext",
    "generate_key",
    "public_key_b64",
    "sign_message",
    "signing_bytes",
    "system_clock",
]

# The Redis implementations live in the Redis layer (middleware.redis); imported on first use, so
# importing middleware.messaging does not import redis.
_REDIS = {
    "RedisBuckets": "middleware.redis.rate_limits",
    "RedisMailbox": "middleware.redis.mailbox",
    "RedisSubscriptions": "middleware.redis.subscriptions",
}
__getattr__, __dir__ = lazy_exports(__name__, _REDIS, __all__)
