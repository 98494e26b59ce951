"""Names of clients, agents and people: look-alikes, and the prefixes the gateway keeps for itself.

The one name rule (:func:`middleware.access.same_name`) says two names are one when they are
equal stripped and case-folded: ``Bob`` and ``bob`` are one client, ``Alice`` may not approve
what ``alice`` submitted. Ownership is decided by that rule alone. Where a *new* name is taken
(an agent registering itself, a person or client in the definition) a stricter test applies:
a name that merely *looks like* one in use is refused too, so ``ag1`` cannot sit beside
``agl`` and ``hurnan:eve`` cannot pose as a person's mailbox. :func:`name_key` is that test's
keys (:func:`name_keys`): the name NFKC-case-folded and mapped to its UTS #39 confusable
skeleton by ICU's spoof checker (``1``, ``I`` and ``l`` are one; ``0`` and ``O``; ``rn`` and
``m``; Cyrillic ``а`` and Latin ``a``), case-folded again, and the same with the skeleton
taken before case folding. Two names that share a key are look-alikes.

:data:`RESERVED_PREFIXES` are the gateway's own namespaces: people's mailboxes (``human:``),
the gateway's services (``agency:``, the human desk is ``agency:desk``) and the messaging
runtime's completion watcher (``runtime.watcher:``). No agent registers under them, in any
spelling that looks like them.
"""

from __future__ import annotations

import threading
import unicodedata
from functools import lru_cache
from typing import Any

__all__ = ["RESERVED_PREFIXES", "look_alike", "name_key", "name_keys", "reserved_prefix"]

#: Prefixes of names the gateway gives itself (see the module docstring).
RESERVED_PREFIXES = ("human:", "agency:", "runtime.watcher:")

_local = threading.local()  # one ICU spoof checker per thread (it keeps state between calls)


def _checker() -> Any:
    checker = getattr(_local, "checker", None)
    if checker is None:
        import icu

        checker = _local.checker = icu.SpoofChecker()
    return checker


def _skeleton(text: str) -> str:
    return str(_checker().getSkeleton(0, text))


@lru_cache(maxsize=65_536)
def name_keys(name: str) -> tuple[str, ...]:
    """The keys look-alike names share (see the module docstring; not for display): the
    skeleton of the case-folded name, so names that differ in case always share one, and the
    case-folded skeleton of the name as written, so ``AI`` meets ``al`` (``I`` and ``l`` are one
    before case folding turns ``I`` into ``i``)."""
    nfkc = unicodedata.normalize("NFKC", name.strip())
    folded_first = _fold(_skeleton(nfkc.casefold()))
    skeleton_first = _fold(_skeleton(_fold(_skeleton(nfkc))))
    return tuple(dict.fromkeys((folded_first, skeleton_first)))


def name_key(name: str) -> str:
    """The first of :func:`name_keys`: names that differ only in case share it."""
    return name_keys(name)[0]


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def look_alike(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are one name or look like one (empty names are no one's)."""
    return bool(a.strip()) and bool(b.strip()) and bool(set(name_keys(a)) & set(name_keys(b)))


def reserved_prefix(name: str) -> str:
    """The reserved prefix ``name`` starts with, or looks like it starts with; ``""`` if none."""
    keys = name_keys(name)
    return next((p for p in RESERVED_PREFIXES if any(k.startswith(name_key(p)) for k in keys)), "")
