"""Findings of the offline checkers (``agency goal lint``, ``agency smf validate``).

A finding is data: a severity, a stable code, a message, and where (file, item, field).
Errors fail the check (non-zero exit); warnings do not, unless asked to.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["ICONS", "Finding", "Severity", "load_documents", "render_json", "render_text", "summary"]

Severity = Literal["error", "warning", "ok"]

ICONS: dict[str, str] = {"ok": "✅", "warning": "⚠️", "error": "❌"}


@dataclass(frozen=True)
class Finding:
    """One thing a checker found.

    Attributes:
        severity: ``error`` (fails the check), ``warning``, or ``ok`` (a passing item).
        code: Stable, machine-readable code, e.g. ``not-machine-checkable``.
        message: What is wrong (or right), in words.
        file: The file it was found in.
        item: Which item of the file (a goal id, a message id, or ``#index``).
        field: The offending field, dotted, when there is one.
    """

    severity: Severity
    code: str
    message: str
    file: str = ""
    item: str = ""
    field: str = ""

    def line(self, *, with_location: bool = True) -> str:
        """The finding as one line: icon, location, message and code."""
        where = ":".join(x for x in (self.file, self.item) if x) if with_location else ""
        if self.field and not self.message.startswith(self.field.rsplit(".", 1)[-1]):
            where = f"{where} {self.field}".strip()
        text = f"{where}: {self.message}" if where else self.message
        code = "" if self.severity == "ok" else f" [{self.code}]"
        return f"{ICONS[self.severity]} {text}{code}"


def summary(findings: Sequence[Finding]) -> dict[str, int]:
    return {
        "errors": sum(f.severity == "error" for f in findings),
        "warnings": sum(f.severity == "warning" for f in findings),
    }


def render_text(findings: Sequence[Finding], *, with_location: bool = True) -> str:
    """One line per finding, then a summary line."""
    counts = summary(findings)
    lines = [f.line(with_location=with_location) for f in findings]
    lines.append(f"{counts['errors']} error(s), {counts['warnings']} warning(s)")
    return "\n".join(lines) + "\n"


def render_json(findings: Sequence[Finding], **extra: Any) -> str:
    """``{"ok": ..., "summary": ..., "findings": [...]}`` for machines."""
    counts = summary(findings)
    doc = {
        "ok": counts["errors"] == 0,
        "summary": {**counts, **extra},
        "findings": [asdict(f) for f in findings],
    }
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def load_documents(path: str) -> Any:
    """Read a JSON or YAML file (YAML for ``.yaml``/``.yml``; JSON, else YAML, otherwise).

    Raises:
        OSError: the file cannot be read.
        ValueError: it is neither valid JSON nor YAML (the message says where).
    """
    import yaml

    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if path.endswith((".yaml", ".yml")):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"not valid YAML: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            raise ValueError(f"not valid JSON: {exc}") from None
