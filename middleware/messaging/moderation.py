"""Moderation: explicit rules move a message to a quarantine board instead of delivering it.

Rules are pluggable (:class:`ModerationRule`: ``check(sender, message, now) -> reason | None``);
the built-ins, set in the definition file's ``messaging.moderation``, are deliberately narrow
(the design warns that over-blocking costs more than the spam it stops):

- :class:`DenyPhrases` — whole-word, case-insensitive phrases in the text of the content
  (``"wire the money"`` matches "Please WIRE the money!" but not "rewire the money-box").
  Literal phrases, never client-supplied regular expressions (linear time).
- :class:`RepeatedContent` — spam mark: the same sender sending the same content more than
  ``max_repeats`` times within ``window_seconds``.
- Reports: ``reports_to_quarantine`` agents (distinct) reporting one message
  (``MessageService.Report``) quarantine it; copies not yet pulled are held back at pull.

A quarantined message waits on the board (:class:`QuarantineBoard`, in Redis when the
mailboxes are) until a caller with the gateway's admin role (``MessageService``) or a person
with the ``moderator`` human role (the operator console's inbox, through the human desk)
releases it (delivered to the recipients it was meant for) or deletes it. Each held item
carries its evidence (the matched phrase, the reports with their reasons). Every step is
audited: ``message.quarantined``, ``message.reported``, ``message.released``,
``message.deleted``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import Field, field_validator

from .._lazy import lazy_exports
from .._model import Model
from ..audit.record import canonical_json
from ..smf import SMFMessage

__all__ = [
    "MESSAGE_DELETED",
    "MESSAGE_QUARANTINED",
    "MESSAGE_RELEASED",
    "MESSAGE_REPORTED",
    "DenyPhrases",
    "MemoryBoard",
    "ModerationRule",
    "ModerationSettings",
    "QuarantineBoard",
    "Quarantined",
    "RepeatedContent",
    "content_text",
]

MESSAGE_QUARANTINED = "message.quarantined"
MESSAGE_REPORTED = "message.reported"
MESSAGE_RELEASED = "message.released"
MESSAGE_DELETED = "message.deleted"


def content_text(content: Any) -> str:
    """Every string in ``content`` (keys and values of JSON objects too), joined by newlines."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                out.append(str(k))
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(content)
    return "\n".join(out)


@runtime_checkable
class ModerationRule(Protocol):
    """A rule: the reason to quarantine ``message`` from ``sender`` (None: let it through)."""

    name: str

    def check(self, sender: str, message: SMFMessage, now: float) -> str | None: ...


class DenyPhrases:
    """Quarantine content containing one of ``phrases`` as whole words, case-insensitively."""

    name = "deny_phrases"

    def __init__(self, phrases: list[str]) -> None:
        self.phrases = [p for p in phrases if p.strip()]
        # one linear-time alternation of escaped literals, bounded by word boundaries
        body = "|".join(re.escape(" ".join(p.lower().split())).replace(r"\ ", r"\s+") for p in self.phrases)
        self._pattern = re.compile(rf"(?<!\w)(?:{body})(?!\w)") if body else None

    def check(self, sender: str, message: SMFMessage, now: float) -> str | None:
        if self._pattern is None:
            return None
        found = self._pattern.search(content_text(message.content).lower())
        return f"denied phrase {found.group(0)!r}" if found else None

    def evidence(self, sender: str, message: SMFMessage) -> dict[str, Any]:
        """What matched (shown to the moderator): ``{"phrase": ..., "matched": ...}``."""
        if self._pattern is None:
            return {}
        found = self._pattern.search(content_text(message.content).lower())
        if found is None:
            return {}
        said = " ".join(found.group(0).split())
        phrase = next((p for p in self.phrases if " ".join(p.lower().split()) == said), said)
        return {"phrase": phrase, "matched": found.group(0)}


class RepeatedContent:
    """Spam mark: one sender sending the same content more than ``max_repeats`` times within
    ``window`` seconds (counted in this process)."""

    name = "repeated_content"

    def __init__(self, max_repeats: int, window: float) -> None:
        self.max_repeats = max_repeats
        self.window = window
        self._seen: dict[tuple[str, str], deque[float]] = {}

    def check(self, sender: str, message: SMFMessage, now: float) -> str | None:
        digest = hashlib.sha256(canonical_json(message.content)).hexdigest()
        times = self._seen.setdefault((sender, digest), deque())
        while times and times[0] <= now - self.window:
            times.popleft()
        times.append(now)
        if len(self._seen) > 100_000:  # bounded memory: forget the oldest keys
            for key in list(self._seen)[:10_000]:
                del self._seen[key]
        if len(times) > self.max_repeats:
            return f"spam: the same content {len(times)} times in {self.window:g} s"
        return None


class RepeatSettings(Model):
    max_repeats: int = Field(ge=1, description="Identical messages allowed per window.")
    window_seconds: float = Field(gt=0, le=86400)


class ModerationSettings(Model):
    """``messaging.moderation``: explicit rules; nothing is moderated by default."""

    deny_phrases: list[str] = Field(
        default_factory=list, description="Whole-word, case-insensitive phrases that quarantine a message."
    )
    repeated_content: RepeatSettings | None = Field(
        default=None, description="Quarantine the same content from one sender beyond this rate."
    )
    reports_to_quarantine: int = Field(
        default=0, ge=0, description="Distinct agents reporting a message that quarantine it (0: off)."
    )

    @field_validator("deny_phrases")
    @classmethod
    def _phrases(cls, v: list[str]) -> list[str]:
        for i, phrase in enumerate(v):
            if not phrase.strip() or len(phrase) > 200:
                raise ValueError(f"item {i}: a phrase of 1-200 characters")
        return v

    def rules(self) -> list[ModerationRule]:
        out: list[ModerationRule] = []
        if self.deny_phrases:
            out.append(DenyPhrases(self.deny_phrases))
        if self.repeated_content is not None:
            out.append(
                RepeatedContent(self.repeated_content.max_repeats, self.repeated_content.window_seconds)
            )
        return out


class Quarantined(Model):
    """A message on the quarantine board."""

    message_id: str
    sender: str
    reason: str
    rule: str
    at: float
    recipients: list[str] = Field(
        default_factory=list, description="Who it was meant for (release sends it)."
    )
    envelope: str = Field(
        default="",
        description="The envelope as stored in a mailbox (JSON); empty when quarantined by "
        "reports after every copy was delivered.",
    )
    evidence: dict[str, Any] = Field(
        default_factory=dict,
        description="Why, in detail: the matched phrase, the reports (reporter -> reason) ...",
    )
    status: Literal["held"] = "held"


@runtime_checkable
class QuarantineBoard(Protocol):
    async def hold(self, item: Quarantined) -> None: ...

    async def get(self, message_id: str) -> Quarantined | None: ...

    async def take(self, message_id: str) -> Quarantined | None:
        """Remove and return it (release or delete)."""
        ...

    async def items(self, limit: int = 100) -> list[Quarantined]: ...

    async def is_held(self, message_ids: list[str]) -> set[str]: ...

    async def report(self, message_id: str, reporter: str, reason: str = "") -> int:
        """Record a report; how many distinct agents reported the message."""
        ...

    async def reports(self, message_id: str) -> dict[str, str]:
        """The reports of a message: reporter -> reason (the latest of each reporter)."""
        ...


class MemoryBoard:
    def __init__(self) -> None:
        self._items: dict[str, Quarantined] = {}
        self._reports: dict[str, dict[str, str]] = {}
        self._held_ids: set[str] = set()

    async def hold(self, item: Quarantined) -> None:
        self._items[item.message_id] = item
        self._held_ids.add(item.message_id)

    async def get(self, message_id: str) -> Quarantined | None:
        return self._items.get(message_id)

    async def take(self, message_id: str) -> Quarantined | None:
        self._held_ids.discard(message_id)
        return self._items.pop(message_id, None)

    async def items(self, limit: int = 100) -> list[Quarantined]:
        return sorted(self._items.values(), key=lambda q: q.at)[:limit]

    async def is_held(self, message_ids: list[str]) -> set[str]:
        return {m for m in message_ids if m in self._held_ids}

    async def report(self, message_id: str, reporter: str, reason: str = "") -> int:
        reporters = self._reports.setdefault(message_id, {})
        reporters[reporter] = reason
        return len(reporters)

    async def reports(self, message_id: str) -> dict[str, str]:
        return dict(self._reports.get(message_id, {}))


def quarantine_json(item: Quarantined) -> str:
    """The board entry as a client sees it (no envelope internals beyond the message)."""
    envelope = json.loads(item.envelope)
    return json.dumps({**item.model_dump(exclude={"envelope"}), "message": envelope.get("message")})


# The Redis implementation lives in the Redis layer; its name stays importable here
# (imported on first use, so importing this module does not import redis).
__getattr__, __dir__ = lazy_exports(
    __name__, {"RedisBoard": "middleware.redis.quarantine_board"}, [*__all__, "RedisBoard"]
)
