"""Semantic versions (semver.org 2.0.0) and version ranges, strictly parsed.

:class:`Version` orders by semver precedence: ``MAJOR.MINOR.PATCH`` numerically, a
pre-release sorts before its release, pre-release identifiers compare one by one
(numeric ones numerically and below alphanumeric ones, a shorter list first when
all else is equal), and build metadata is ignored::

    1.0.0-alpha < 1.0.0-alpha.1 < 1.0.0-alpha.beta < 1.0.0-beta < 1.0.0-beta.2
      < 1.0.0-beta.11 < 1.0.0-rc.1 < 1.0.0

:class:`VersionRange` uses the range syntax most people know from npm/cargo:

=================  =====================================================
``*`` or empty     any release
``1.2.3``/``=1.2.3``  exactly that version
``>=1.2.0 <2.0.0``  comparators separated by spaces or commas, all must hold
``^1.2.3``         compatible: ``>=1.2.3 <2.0.0`` (``^0.2.3`` → ``<0.3.0``)
``~1.2.3``         patch-level: ``>=1.2.3 <1.3.0`` (``~1`` → ``<2.0.0``)
``1.x``, ``1.2.*``, ``1``  wildcards
``A || B``         either range
=================  =====================================================

As in npm, a pre-release version (``2.0.0-rc.1``) only satisfies a range if some
comparator in the same alternative names a pre-release of the same
``MAJOR.MINOR.PATCH``: ``>=2.0.0-rc.0`` admits ``2.0.0-rc.1`` but ``>=1.0.0`` does not,
so a range never opts into unstable versions by accident.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache, total_ordering

from .errors import InvalidInput, Problem

__all__ = ["Version", "VersionRange"]

_NUM = r"0|[1-9]\d*"
_PRE_ID = r"(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_VERSION_RE = re.compile(
    rf"^({_NUM})\.({_NUM})\.({_NUM})"
    rf"(?:-({_PRE_ID}(?:\.{_PRE_ID})*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_PARTIAL_RE = re.compile(
    rf"^v?({_NUM}|[xX*])(?:\.({_NUM}|[xX*]))?(?:\.({_NUM}|[xX*]))?"
    rf"(?:-({_PRE_ID}(?:\.{_PRE_ID})*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_COMPARATOR_RE = re.compile(r"^(>=|<=|>|<|=|\^|~)?\s*(.*)$")


@total_ordering
@dataclass(frozen=True)
class Version:
    """A semantic version; compare with ``<``, ``==`` by semver precedence."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()
    build: str = field(default="", compare=False)

    @classmethod
    def parse(cls, text: str) -> Version:
        """Parse ``MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]``.

        Raises:
            InvalidInput: ``text`` is not a semantic version.
        """
        return _parse_version(text.strip() if isinstance(text, str) else text)

    @property
    def is_prerelease(self) -> bool:
        return bool(self.prerelease)

    @property
    def release(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def _key(self) -> tuple[object, ...]:
        # A release sorts after all its pre-releases; identifiers: numbers < strings.
        pre: tuple[object, ...] = tuple(
            (0, p, "") if isinstance(p, int) else (1, 0, p) for p in self.prerelease
        )
        return (self.major, self.minor, self.patch, 0 if pre else 1, pre)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(p) for p in self.prerelease)
        if self.build:
            text += "+" + self.build
        return text


@lru_cache(maxsize=65536)
def _parse_version(text: str) -> Version:
    m = _VERSION_RE.match(text) if isinstance(text, str) else None
    if m is None:
        raise InvalidInput(
            [Problem("version", f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH[-PRE][+BUILD])")]
        )
    pre = tuple(int(p) if p.isdigit() else p for p in m.group(4).split(".")) if m.group(4) else ()
    return Version(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre, m.group(5) or "")


@dataclass(frozen=True)
class _Comparator:
    op: str  # one of > >= < <= =
    version: Version

    def test(self, v: Version) -> bool:
        if self.op == "=":
            return v == self.version
        if self.op == ">":
            return v > self.version
        if self.op == ">=":
            return v >= self.version
        if self.op == "<":
            return v < self.version
        return v <= self.version

    def __str__(self) -> str:
        return f"{self.op}{self.version}"


@dataclass(frozen=True)
class VersionRange:
    """A set of versions, e.g. ``^2.1`` or ``>=1.0.0 <3.0.0 || 4.x`` (see module docstring)."""

    text: str
    alternatives: tuple[tuple[_Comparator, ...], ...]

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        """Parse a range expression.

        Raises:
            InvalidInput: naming the offending part of ``text``.
        """
        return _parse_range(text.strip() if isinstance(text, str) else text)

    @property
    def is_any(self) -> bool:
        return any(not alt for alt in self.alternatives)

    def contains(self, version: Version | str) -> bool:
        """Whether ``version`` is in the range (pre-releases only by explicit opt-in)."""
        v = version if isinstance(version, Version) else Version.parse(version)
        for alt in self.alternatives:
            if not all(c.test(v) for c in alt):
                continue
            if not v.is_prerelease:
                return True
            if any(c.version.is_prerelease and c.version.release == v.release for c in alt):
                return True
        return False

    def __contains__(self, version: object) -> bool:
        return isinstance(version, (Version, str)) and self.contains(version)

    def __str__(self) -> str:
        return self.text or "*"


@lru_cache(maxsize=4096)
def _parse_range(text: str) -> VersionRange:
    if not isinstance(text, str):
        raise InvalidInput([Problem("version_range", "must be a string")])
    alternatives = []
    for alt_text in text.split("||"):
        comparators: list[_Comparator] = []
        tokens = _tokens(alt_text)
        if not tokens and "||" in text:
            raise InvalidInput([Problem("version_range", f"{text!r} has an empty alternative around '||'")])
        for token in tokens:
            comparators.extend(_comparators(token, text))
        alternatives.append(tuple(comparators))
    return VersionRange(text, tuple(alternatives))


def _tokens(alt: str) -> list[str]:
    # ">= 1.2.0" is one comparator: glue a lone operator to the version after it.
    raw = [t for t in re.split(r"[\s,]+", alt.strip()) if t]
    out: list[str] = []
    for token in raw:
        if out and out[-1] in (">=", "<=", ">", "<", "=", "^", "~"):
            out[-1] += token
        else:
            out.append(token)
    return out


def _comparators(token: str, whole: str) -> list[_Comparator]:
    m = _COMPARATOR_RE.match(token)
    assert m is not None  # the pattern matches any string
    op, rest = m.group(1) or "", m.group(2)
    p = _PARTIAL_RE.match(rest)
    if p is None or (op and not rest):
        raise InvalidInput(
            [Problem("version_range", f"{token!r} in {whole!r} is not a version or comparator")]
        )
    parts = [p.group(1), p.group(2), p.group(3)]
    wild = [x is None or x in "xX*" for x in parts]
    # "1.x.3" is nonsense: once a part is a wildcard, the rest must be too.
    if any(wild[i] and not wild[i + 1] for i in range(2)):
        raise InvalidInput([Problem("version_range", f"{token!r}: a number cannot follow a wildcard")])
    nums = [0 if w else int(x) for x, w in zip(parts, wild, strict=True)]
    pre = tuple(int(x) if x.isdigit() else x for x in p.group(4).split(".")) if p.group(4) else ()
    if pre and any(wild):
        raise InvalidInput([Problem("version_range", f"{token!r}: a pre-release needs a full version")])
    base = Version(nums[0], nums[1], nums[2], pre)
    n_fixed = wild.index(True) if any(wild) else 3

    if op in ("", "=") and n_fixed == 3:
        return [_Comparator("=", base)]
    if op in ("", "="):  # wildcard: 1.x → >=1.0.0 <2.0.0 ; * → any
        return _span(base, n_fixed)
    if op == "^":
        if n_fixed == 0:
            return []
        # bump the first non-zero of the fixed parts (or the last fixed one)
        bump = next((i for i in range(n_fixed) if nums[i] != 0), n_fixed - 1)
        return [_Comparator(">=", base), _Comparator("<", _bumped(nums, bump))]
    if op == "~":
        if n_fixed == 0:
            return []
        return [_Comparator(">=", base), _Comparator("<", _bumped(nums, 1 if n_fixed >= 2 else 0))]
    if n_fixed == 0:  # ">=*" etc.
        return [] if op in (">=", "<=") else [_Comparator("<", Version(0, 0, 0, (0,)))]
    if n_fixed < 3:  # >1.2 means >=1.3.0; <=1.2 means <1.3.0; >=1.2 / <1.2 use 1.2.0
        if op == ">":
            return [_Comparator(">=", _bumped(nums, n_fixed - 1))]
        if op == "<=":
            return [_Comparator("<", _bumped(nums, n_fixed - 1))]
    return [_Comparator(op, base)]


def _span(base: Version, n_fixed: int) -> list[_Comparator]:
    if n_fixed == 0:
        return []
    nums = [base.major, base.minor, base.patch]
    return [_Comparator(">=", base), _Comparator("<", _bumped(nums, n_fixed - 1))]


def _bumped(nums: list[int], index: int) -> Version:
    out = [*nums[:index], nums[index] + 1] + [0] * (2 - index)
    # "<2.0.0" would admit 2.0.0-rc.1 under plain precedence; the pre-release rule in
    # VersionRange.contains keeps it out unless a comparator opts in.
    return Version(out[0], out[1], out[2])


def checked_range_text(text: str) -> str:
    """``text`` trimmed, if empty or a valid :class:`VersionRange` (for pydantic validators).

    Raises:
        ValueError: saying why the range does not parse.
    """
    text = text.strip()
    if text:
        try:
            VersionRange.parse(text)
        except InvalidInput as exc:
            raise ValueError(exc.problems[0].reason) from None
    return text
