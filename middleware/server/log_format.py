"""Structured JSON log lines (one object per line) with trace ids.

``JsonFormatter`` renders every record as ``{"time", "level", "logger", "message",
...extra}``; pass ``extra={"trace_id": ...}`` when logging and it appears as a field.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

__all__ = ["JsonFormatter", "configure_logging"]

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


def configure_logging(level: int, fmt: str = "text") -> None:
    """Configure the root logger once for a CLI process (``fmt``: ``text`` or ``json``)."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
