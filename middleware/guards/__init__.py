"""Content guards: personal data and prompt injection screened at dispatch (docs/security.md).

``pii`` finds personal data, ``redaction`` replaces it, ``injection`` finds injected
instructions, ``content_guard`` is what the dispatcher asks, ``audit_guard`` keeps personal
data out of the audit log in clear, ``policy`` / ``cedar_policy`` ask policies as code.
"""

from .audit_guard import PersonalDataAuditLog
from .config import GuardConfig, InjectionSettings, PersonalDataSettings
from .content_guard import ContentGuard, Screened
from .injection import (
    HeuristicInjectionDetector,
    InjectionDetector,
    InjectionFinding,
    LangChainInjectionDetector,
)
from .pii import DATA_CLASSES, PiiMatch, PiiRecognizer, PiiScanner, default_recognizers
from .redaction import Redactions, Tokenizer

__all__ = [
    "DATA_CLASSES",
    "ContentGuard",
    "GuardConfig",
    "HeuristicInjectionDetector",
    "InjectionDetector",
    "InjectionFinding",
    "InjectionSettings",
    "LangChainInjectionDetector",
    "PersonalDataAuditLog",
    "PersonalDataSettings",
    "PiiMatch",
    "PiiRecognizer",
    "PiiScanner",
    "Redactions",
    "Screened",
    "Tokenizer",
    "default_recognizers",
]
