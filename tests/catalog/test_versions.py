"""Semantic versions and ranges: the semver.org precedence vector and properties."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from middleware.errors import InvalidInput
from middleware.versions import Version, VersionRange

# semver.org 2.0.0, item 11: "Example: 1.0.0-alpha < 1.0.0-alpha.1 < ... < 1.0.0."
SEMVER_ORG = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "2.0.0",
    "2.1.0",
    "2.1.1",
]


def test_precedence_follows_the_semver_org_example() -> None:
    parsed = [Version.parse(v) for v in SEMVER_ORG]
    assert sorted(reversed(parsed)) == parsed
    assert all(a < b for a, b in itertools.pairwise(parsed))


def test_build_metadata_is_ignored_for_precedence() -> None:
    assert Version.parse("1.0.0+build.1") == Version.parse("1.0.0+other")
    assert str(Version.parse("1.0.0-rc.1+build.5")) == "1.0.0-rc.1+build.5"


@pytest.mark.parametrize(
    "bad", ["1", "1.0", "01.0.0", "1.0.0-", "1.0.0-01", "v1.0.0", "1.0.0.0", "a.b.c", ""]
)
def test_invalid_versions_are_refused(bad: str) -> None:
    with pytest.raises(InvalidInput):
        Version.parse(bad)


@pytest.mark.parametrize(
    ("rng", "inside", "outside"),
    [
        ("1.2.3", ["1.2.3", "1.2.3+b"], ["1.2.4", "1.2.3-rc.1"]),
        ("^1.2.3", ["1.2.3", "1.9.9"], ["2.0.0", "1.2.2", "2.0.0-rc.1"]),
        ("^0.2.3", ["0.2.3", "0.2.9"], ["0.3.0"]),
        ("^0.0.3", ["0.0.3"], ["0.0.4"]),
        ("~1.2.3", ["1.2.3", "1.2.9"], ["1.3.0"]),
        ("~1", ["1.0.0", "1.9.0"], ["2.0.0"]),
        ("1.x", ["1.0.0", "1.99.0"], ["2.0.0", "0.9.9"]),
        ("1.2.*", ["1.2.0", "1.2.7"], ["1.3.0"]),
        ("*", ["0.0.1", "9.9.9"], ["1.0.0-rc.1"]),
        (">=1.2.0 <2", ["1.2.0", "1.99.0"], ["2.0.0", "1.1.9", "2.0.0-rc.1"]),
        (">1.2", ["1.3.0"], ["1.2.9"]),
        ("<=1.2", ["1.2.9"], ["1.3.0"]),
        (">=1.0.0, <1.5.0 || >=3", ["1.4.0", "3.1.0"], ["2.0.0"]),
        (">=2.0.0-rc.0 <2.1", ["2.0.0-rc.1", "2.0.0"], ["2.1.0-rc.1", "1.9.0"]),
    ],
)
def test_ranges(rng: str, inside: list[str], outside: list[str]) -> None:
    r = VersionRange.parse(rng)
    assert [v for v in inside if v not in r] == []
    assert [v for v in outside if v in r] == []


@pytest.mark.parametrize("bad", ["1.x.3", ">=", "^", "abc", ">>1", "1.2.3.4", "1 || ", "^1.x-rc.1"])
def test_invalid_ranges_are_refused_naming_the_part(bad: str) -> None:
    with pytest.raises(InvalidInput) as err:
        VersionRange.parse(bad)
    assert err.value.field == "version_range"


versions = st.builds(
    Version,
    st.integers(0, 30),
    st.integers(0, 30),
    st.integers(0, 30),
    st.lists(st.one_of(st.integers(0, 20), st.sampled_from(["alpha", "beta", "rc", "x-1"])), max_size=3).map(
        tuple
    ),
)


@given(versions)
def test_printing_and_parsing_round_trip(v: Version) -> None:
    assert Version.parse(str(v)) == v


@given(versions, versions)
def test_order_is_total_and_antisymmetric(a: Version, b: Version) -> None:
    assert (a < b) + (b < a) + (a == b) == 1


@given(versions, versions)
def test_caret_range_is_the_same_major_and_not_lower(base: Version, v: Version) -> None:
    if base.major == 0 or base.is_prerelease:
        return
    expected = v.major == base.major and v >= base and not v.is_prerelease
    assert VersionRange.parse(f"^{base}").contains(v) == expected
