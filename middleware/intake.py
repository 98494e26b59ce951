"""Intake: an L1 agent anchors the user's goal and the context it extracted.

In the seed's section 4.2 the access layer (``greeting_agent``) reads the user's
sentence, establishes the intent and anchors the goal (``GOAL_WARRANTY_001``) itself,
and collects the context the specialists need (``user_id``, ``device_model``,
``fault_type``, ``purchase_date``). A client then sends only what the user said.

An agent may anchor a goal only when its contract says so: ``anchor_goal`` in its
``can_do``. Its output is then read as an :class:`Intake`; the pipeline (which plays
the seed's orchestrator) anchors the registered goal it names, adds the context to the
task (every later agent's input holds it), and keeps the user's language for replies.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from ._model import Model

__all__ = ["ANCHOR_ACTION", "Intake", "detect_language"]

#: The ``can_do`` action that lets an agent anchor the task's goal.
ANCHOR_ACTION = "anchor_goal"

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def detect_language(text: str) -> str:
    """``zh`` when the text is written in Chinese (any CJK ideograph), else ``en``."""
    return "zh" if _CJK.search(text or "") else "en"


class Intake(Model):
    """What an intake (greeting) agent extracted from the user's sentence."""

    intent: str = Field(
        min_length=1, max_length=128, description="The user's intent, e.g. warranty_replacement."
    )
    goal_id: str = Field(
        default="", max_length=64, description="The registered goal to anchor (empty: none)."
    )
    context: dict[str, Any] = Field(
        default_factory=dict, description="Facts the later agents need (user_id, device_model ...)."
    )
    language: str = Field(default="", max_length=16, description="The user's language (zh, en ...).")
