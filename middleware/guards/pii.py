"""Personal data in text: the data classes and the recognizers that find them.

A :class:`PiiRecognizer` finds one data class in a text and returns where. The built-ins
validate what they find with the libraries that know the formats, not with a pattern alone:

==================  ===========================================================================
data class          how it is found
==================  ===========================================================================
``email``           an address pattern (RFC 5322's common form; no library recognises them in text)
``phone``           ``phonenumbers.PhoneNumberMatcher`` (valid numbers only), for the configured
                    regions (default CN and US; a ``+`` number is found whatever the region),
                    so a Chinese mobile number ``13812345678`` and ``+1 650-253-0000`` both are
``payment_card``    13–19 digits (one run, or grouped as cards print them) passing the Luhn check
                    (``stdnum.luhn``), starting with a card network's digit (2–6)
``cn_resident_id``  the 18-character resident identity number, its birth date and its ISO 7064
                    check character verified (``stdnum.cn.ric``)
``iban``            an IBAN, its country format and check digits verified (``stdnum.iban``)
==================  ===========================================================================

:class:`PiiScanner` runs the recognizers over a text, drops overlapping finds (the longer
one wins: an 18-digit resident id is never also a phone number) and skips texts that cannot
hold any (no ``@`` and no run of seven digits) without running the costly ones.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "DATA_CLASSES",
    "CardRecognizer",
    "EmailRecognizer",
    "IbanRecognizer",
    "PhoneRecognizer",
    "PiiMatch",
    "PiiRecognizer",
    "PiiScanner",
    "ResidentIdRecognizer",
    "default_recognizers",
]

#: The data classes the built-in recognizers find.
DATA_CLASSES = ("email", "phone", "payment_card", "cn_resident_id", "iban")

# Digits and ASCII letters around a find mean it is part of a longer token (an id, a hash).
# ``\b`` does not do here: Chinese characters are word characters, so 号13812345678 has none.
_ALNUM_BEFORE = r"(?<![0-9A-Za-z])"
_ALNUM_AFTER = r"(?![0-9A-Za-z])"


@dataclass(frozen=True)
class PiiMatch:
    """One find: its data class and where it is in the text (``text[start:end]``)."""

    data_class: str
    start: int
    end: int


@runtime_checkable
class PiiRecognizer(Protocol):
    """Finds one data class in a text (the plug-in point for more: a name, an address ...)."""

    data_class: str

    def find(self, text: str) -> Iterable[tuple[int, int]]:
        """The ``(start, end)`` of every find in ``text``."""
        ...


class EmailRecognizer:
    """E-mail addresses."""

    data_class = "email"
    _pattern = re.compile(
        r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![A-Za-z0-9-])"
    )

    def find(self, text: str) -> Iterable[tuple[int, int]]:
        if "@" not in text:
            return ()
        return [m.span() for m in self._pattern.finditer(text)]


# A run of at least seven digits, with the separators numbers are written with, and a leading +.
_PHONE_RUN = re.compile(r"\+?[(\uff08]?\d(?:[\d \-.()/\uff08\uff09]{0,3}\d){6,}")


class PhoneRecognizer:
    """Valid phone numbers (``phonenumbers``), read as numbers of ``regions`` when not international."""

    data_class = "phone"

    def __init__(self, regions: Sequence[str] = ("CN", "US")) -> None:
        import phonenumbers

        unknown = [r for r in regions if r.upper() not in phonenumbers.SUPPORTED_REGIONS]
        if unknown:
            raise ValueError(f"unknown phone regions {', '.join(unknown)} (ISO 3166 alpha-2 codes)")
        self.regions = [r.upper() for r in regions] or ["ZZ"]
        self._phonenumbers = phonenumbers

    def find(self, text: str) -> Iterable[tuple[int, int]]:
        # The matcher is costly on long texts: it reads only the runs that could be numbers
        # (same finds, measured ~4x faster on a sentence holding one number).
        pn = self._phonenumbers
        spans: set[tuple[int, int]] = set()
        for run in _PHONE_RUN.finditer(text):
            window, at = run.group(0), run.start()
            for region in self.regions:
                for match in pn.PhoneNumberMatcher(window, region, leniency=pn.Leniency.VALID):
                    spans.add((at + match.start, at + match.end))
        return sorted(spans)


class CardRecognizer:
    """Payment card numbers: 13–19 digits passing the Luhn check, from a card network (2–6),
    written as one run or in the groups cards print (4-4-4-4, 4-4-4-4-3, 4-6-5)."""

    data_class = "payment_card"
    _pattern = re.compile(
        _ALNUM_BEFORE + r"(?:[2-6]\d{12,18}|[2-6]\d{3}(?P<s>[ -])\d{4}(?P=s)\d{4}(?P=s)\d{4}(?:(?P=s)\d{3})?"
        r"|3\d{3}(?P<a>[ -])\d{6}(?P=a)\d{5})" + _ALNUM_AFTER
    )

    def find(self, text: str) -> Iterable[tuple[int, int]]:
        from stdnum import luhn

        out = []
        for m in self._pattern.finditer(text):
            digits = re.sub(r"[ -]", "", m.group(0))
            if 13 <= len(digits) <= 19 and luhn.is_valid(digits):
                out.append(m.span())
        return out


class ResidentIdRecognizer:
    """The 18-character Chinese resident identity number (birth date and check character verified)."""

    data_class = "cn_resident_id"
    _pattern = re.compile(_ALNUM_BEFORE + r"[1-9]\d{16}[\dXx]" + _ALNUM_AFTER)

    def find(self, text: str) -> Iterable[tuple[int, int]]:
        from stdnum.cn import ric

        return [m.span() for m in self._pattern.finditer(text) if ric.is_valid(m.group(0).upper())]


class IbanRecognizer:
    """International bank account numbers (country format and check digits verified)."""

    data_class = "iban"
    _pattern = re.compile(_ALNUM_BEFORE + r"[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}" + _ALNUM_AFTER)

    def find(self, text: str) -> Iterable[tuple[int, int]]:
        from stdnum import iban

        out = []
        for m in self._pattern.finditer(text):
            candidate = m.group(0).rstrip()
            if iban.is_valid(candidate):
                out.append((m.start(), m.start() + len(candidate)))
        return out


def default_recognizers(
    classes: Sequence[str] = DATA_CLASSES, *, phone_regions: Sequence[str] = ("CN", "US")
) -> list[PiiRecognizer]:
    """The built-in recognizers of ``classes``.

    Raises:
        ValueError: a class no built-in recognizer finds, or an unknown phone region.
    """
    unknown = [c for c in classes if c not in DATA_CLASSES]
    if unknown:
        raise ValueError(
            f"no built-in recognizer for {', '.join(unknown)} (known: {', '.join(DATA_CLASSES)})"
        )
    made: dict[str, PiiRecognizer] = {
        "email": EmailRecognizer(),
        "payment_card": CardRecognizer(),
        "cn_resident_id": ResidentIdRecognizer(),
        "iban": IbanRecognizer(),
    }
    if "phone" in classes:
        made["phone"] = PhoneRecognizer(phone_regions)
    return [made[c] for c in classes]


# A text that holds neither an '@' nor seven digits (spaces, dashes, dots, brackets between
# them allowed) holds none of the built-in classes: most texts are skipped on this test alone.
_MAYBE = re.compile(r"@|\d(?:[\s\-.()/]{0,3}\d){6}")


class PiiScanner:
    """Runs recognizers over texts; overlapping finds are resolved in favour of the longer one.

    Args:
        recognizers: What to look for (default: every built-in class).
        prefilter: Skip texts without an ``@`` or seven digits (right for the built-ins; turn it
            off when a custom recognizer finds data without digits, such as names).
    """

    def __init__(
        self,
        recognizers: Sequence[PiiRecognizer] | None = None,
        *,
        prefilter: bool = True,
        memo_size: int = 1024,
    ) -> None:
        self.recognizers = list(recognizers) if recognizers is not None else default_recognizers()
        self.prefilter = prefilter
        # The same texts come back many times in one task (the request in every step's input and
        # in several audit records): their finds are remembered, the least recently used dropped.
        self._memo: OrderedDict[str, list[PiiMatch]] = OrderedDict()
        self._memo_size = memo_size

    @property
    def data_classes(self) -> list[str]:
        return [r.data_class for r in self.recognizers]

    def scan(self, text: str) -> list[PiiMatch]:
        """Every find in ``text``, in order, none overlapping."""
        if not text or (self.prefilter and _MAYBE.search(text) is None):
            return []
        memo = self._memo
        known = memo.get(text)
        if known is not None:
            memo.move_to_end(text)
            return known
        kept = self._scan(text)
        memo[text] = kept
        if len(memo) > self._memo_size:
            memo.popitem(last=False)
        return kept

    def _scan(self, text: str) -> list[PiiMatch]:
        found = [PiiMatch(r.data_class, start, end) for r in self.recognizers for start, end in r.find(text)]
        if not found:
            return []
        kept: list[PiiMatch] = []
        for m in sorted(found, key=lambda m: -(m.end - m.start)):
            if all(m.end <= k.start or m.start >= k.end for k in kept):
                kept.append(m)
        return sorted(kept, key=lambda m: m.start)
