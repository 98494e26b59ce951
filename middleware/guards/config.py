"""The content guards' settings (``agency.guards`` in a definition file; docs/security.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from .._model import Model
from .pii import DATA_CLASSES

__all__ = ["GuardConfig", "InjectionSettings", "PersonalDataSettings"]


#: The fewest bytes a token key file must hold (an HMAC-SHA-256 key of full strength).
MIN_TOKEN_KEY_BYTES = 32


def token_key_of(path: Path) -> bytes:
    """The key in ``path`` (raises ValueError saying why it cannot be one)."""
    try:
        key = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(key) < MIN_TOKEN_KEY_BYTES:
        raise ValueError(
            f"{path} holds {len(key)} bytes; a token key needs at least {MIN_TOKEN_KEY_BYTES} "
            "(head -c 32 /dev/urandom > FILE)"
        )
    return key


class PersonalDataSettings(Model):
    """Personal data: what is looked for, and what happens to it."""

    enabled: bool = Field(default=False, description="Redact or tokenise personal data before dispatch.")
    classes: list[str] = Field(
        default_factory=lambda: list(DATA_CLASSES),
        description="The data classes looked for (email, phone, payment_card, cn_resident_id, iban).",
    )
    phone_regions: list[str] = Field(
        default_factory=lambda: ["CN", "US"],
        description="Regions whose national phone numbers are recognised (+ numbers always are).",
    )
    mode: Literal["tokenize", "redact"] = Field(
        default="tokenize",
        description="tokenize: [phone:3f9a2c1b5d7e], restored in the reply of a contract with "
        "restore_personal_data; redact: [redacted:phone], irreversible.",
    )
    audit: bool = Field(
        default=True,
        description="Replace personal data in audit records too (sealed under the subject's key "
        "when a subject key store is configured, else redacted), so no export holds it in clear.",
    )

    token_key_file: Path | None = Field(
        default=None,
        description="A file whose bytes (at least 32: `head -c 32 /dev/urandom > token.key`) are the "
        "key of the tokens. Give every replica the same file (a Secret, never the data volume), so a "
        "task resumed on another gateway or after a restart restores the tokens it was given; unset: "
        "32 random bytes per gateway process.",
    )

    @field_validator("token_key_file")
    @classmethod
    def _readable_key(cls, v: Path | None) -> Path | None:
        if v is not None:
            token_key_of(v)
        return v

    def token_key(self) -> bytes | None:
        """The bytes of ``token_key_file`` (None: unset, a random key per process)."""
        return None if self.token_key_file is None else token_key_of(self.token_key_file)

    @field_validator("classes")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = [c for c in v if c not in DATA_CLASSES]
        if unknown:
            raise ValueError(f"unknown data classes {', '.join(unknown)} (known: {', '.join(DATA_CLASSES)})")
        return v


class InjectionSettings(Model):
    """Prompt-injection screening of what reaches an agent."""

    enabled: bool = Field(default=False, description="Screen for injected instructions.")
    user_input: bool = Field(default=True, description="Screen the request's text and input before dispatch.")
    outputs: bool = Field(
        default=True, description="Screen every agent's and tool's answer before it reaches the next step."
    )


class GuardConfig(Model):
    """The content guards (all off by default)."""

    personal_data: PersonalDataSettings = Field(default_factory=PersonalDataSettings)
    injection: InjectionSettings = Field(default_factory=InjectionSettings)

    @property
    def any_enabled(self) -> bool:
        return self.personal_data.enabled or self.injection.enabled
