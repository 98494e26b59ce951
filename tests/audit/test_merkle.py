"""RFC 6962 / 9162 Merkle hashing and proofs, against the published vectors."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest

from middleware.audit.merkle import (
    EMPTY_ROOT,
    FileLeafStore,
    MerkleTree,
    ProofError,
    leaf_hash,
    root_of,
    verify_consistency,
    verify_inclusion,
)

# Vendored from transparency-dev/merkle (Apache-2.0, LICENSE beside them).
VECTORS = Path(__file__).resolve().parent / "vectors" / "rfc6962"


def _vectors() -> Path:
    if not (VECTORS / "roots.json").is_file():
        pytest.fail(f"RFC 6962 test vectors missing: expected them at {VECTORS.resolve()}")
    return VECTORS


def _inclusion_cases() -> list[Path]:
    return sorted((VECTORS / "inclusion").rglob("*.json")) if VECTORS.is_dir() else []


def test_vectors_directory_is_present_and_complete() -> None:
    root = _vectors()
    assert len(_inclusion_cases()) >= 90, "inclusion vectors incomplete"
    assert json.loads((root / "roots.json").read_text())["root_hex_by_tree_size"]


def test_roots_for_every_size_match_the_vectors() -> None:
    data = json.loads((_vectors() / "roots.json").read_text())
    inputs = [bytes.fromhex(h) for h in data["leaf_inputs_hex"]]
    expected = data["root_hex_by_tree_size"]
    assert len(expected) == len(inputs) + 1
    tree = MerkleTree()
    for size, want in enumerate(expected):
        assert root_of(inputs[:size]).hex() == want, size
        assert tree.root().hex() == want, size
        if size < len(inputs):
            tree.append(leaf_hash(inputs[size]))
    # every historical root of the grown tree still matches
    for size, want in enumerate(expected):
        assert tree.root(size).hex() == want


@pytest.mark.parametrize("path", _inclusion_cases(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_inclusion_vector_verifies_exactly_as_labelled(path: Path) -> None:
    case = json.loads(path.read_text())
    dec = base64.b64decode

    def run() -> None:
        try:
            proof = [dec(p) for p in case["proof"] or []]
            leaf, root = dec(case["leafHash"] or ""), dec(case["root"] or "")
        except ValueError as exc:  # undecodable input is a failed verification
            raise ProofError(str(exc)) from exc
        verify_inclusion(leaf, case["leafIdx"], case["treeSize"], proof, root)

    if case["wantErr"]:
        with pytest.raises(ProofError):
            run()
    else:
        run()


def test_generated_proofs_match_the_vector_proofs() -> None:
    inputs = [
        bytes.fromhex(h) for h in json.loads((_vectors() / "roots.json").read_text())["leaf_inputs_hex"]
    ]
    tree = MerkleTree(leaf_hash(d) for d in inputs)
    for path in _inclusion_cases():
        case = json.loads(path.read_text())
        if case["wantErr"]:
            continue
        proof = tree.inclusion_proof(case["leafIdx"], case["treeSize"])
        assert [base64.b64encode(p).decode() for p in proof] == (case["proof"] or []), path


def test_all_inclusion_and_consistency_proofs_of_random_trees_verify() -> None:
    rng = random.Random(6962)
    tree = MerkleTree()
    for _n in range(1, 70):
        tree.append(leaf_hash(rng.randbytes(rng.randrange(0, 40))))
    for size in range(1, tree.size + 1):
        root = tree.root(size)
        for index in range(size):
            verify_inclusion(tree.leaf(index), index, size, tree.inclusion_proof(index, size), root)
        for old in range(1, size + 1):
            proof = tree.consistency_proof(old, size)
            verify_consistency(old, size, tree.root(old), root, proof)


def test_a_consistency_proof_from_the_empty_tree_is_refused() -> None:
    """RFC 9162 §2.1.4: proofs are between trees of 0 < m <= n leaves; from 0 nothing is proved."""
    tree = MerkleTree(leaf_hash(bytes([i])) for i in range(8))
    with pytest.raises(ProofError, match="empty tree"):
        verify_consistency(0, 8, tree.root(0), tree.root(8), [])
    with pytest.raises(ProofError, match="empty tree"):
        verify_consistency(0, 0, tree.root(0), tree.root(0), [])
    with pytest.raises(ValueError, match=r"outside 1\.\.8"):
        tree.consistency_proof(0, 8)


def test_tampered_consistency_proofs_fail() -> None:
    tree = MerkleTree(leaf_hash(bytes([i])) for i in range(37))
    for old, new in [(1, 37), (5, 37), (8, 37), (16, 33), (36, 37)]:
        proof = tree.consistency_proof(old, new)
        good = (old, new, tree.root(old), tree.root(new))
        for i in range(len(proof)):
            bad = list(proof)
            bad[i] = bytes([bad[i][0] ^ 1]) + bad[i][1:]
            with pytest.raises(ProofError):
                verify_consistency(*good, bad)
        with pytest.raises(ProofError):
            verify_consistency(*good, [*proof, proof[0]])
        if len(proof) > 1:
            with pytest.raises(ProofError):
                verify_consistency(*good, proof[:-1])
        with pytest.raises(ProofError):
            verify_consistency(old, new, tree.root(old - 1), tree.root(new), proof)
        with pytest.raises(ProofError):
            verify_consistency(old + 1, new, tree.root(old), tree.root(new), proof)
    # a different history is not consistent
    other = MerkleTree(leaf_hash(bytes([i ^ 0xFF])) for i in range(37))
    with pytest.raises(ProofError):
        verify_consistency(5, 37, other.root(5), tree.root(37), tree.consistency_proof(5, 37))


def test_empty_tree_root_is_sha256_of_nothing() -> None:
    assert MerkleTree().root() == EMPTY_ROOT
    assert EMPTY_ROOT.hex().startswith("e3b0c442")


def test_extend_builds_the_same_tree_as_append() -> None:
    rng = random.Random(5)
    one, bulk = MerkleTree(), MerkleTree()
    for chunk in [1, 2, 3, 7, 64, 1, 100, 5]:
        leaves = [leaf_hash(rng.randbytes(8)) for _ in range(chunk)]
        for leaf in leaves:
            one.append(leaf)
        bulk.extend(leaves)
        assert bulk.size == one.size
        for size in range(1, one.size + 1, 7):
            assert bulk.root(size) == one.root(size)
            assert bulk.inclusion_proof(size - 1, size) == one.inclusion_proof(size - 1, size)


@pytest.mark.parametrize("cached_from", [1, 3, 8])
def test_a_file_store_with_few_cached_levels_gives_the_same_tree(
    tmp_path: Path, cached_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Roots, proofs and leaves do not depend on where the leaves live or what is cached."""
    rng = random.Random(cached_from)
    leaves = [leaf_hash(rng.randbytes(8)) for _ in range(700)]
    reference = MerkleTree(leaves)
    monkeypatch.setattr(FileLeafStore, "_FLUSH", 32 * 50)  # reads across the file and its tail
    store = FileLeafStore(tmp_path)
    try:
        tree = MerkleTree(store=store, cached_from=cached_from)
        at = 0
        while at < len(leaves):  # grown in uneven batches, as a log grows
            step = rng.choice([1, 2, 7, 64, 100])
            tree.extend(leaves[at : at + step])
            at += step
            size = min(at, len(leaves))
            assert tree.root() == reference.root(size)
        for size in [1, 2, 3, 255, 256, 257, 511, 512, 699, 700]:
            assert tree.root(size) == reference.root(size)
            for index in {0, size // 3, size - 1}:
                assert tree.inclusion_proof(index, size) == reference.inclusion_proof(index, size)
            for old in {1, size // 2, size - 1, size} - {0}:
                assert tree.consistency_proof(old, size) == reference.consistency_proof(old, size)
        assert tree.leaf(699) == leaves[699] and tree.leaf_hashes(700) == b"".join(leaves)
    finally:
        tree.close()
    assert not list(tmp_path.iterdir()), "the store's file has no name and leaves nothing behind"


def test_cached_levels_must_be_sensible() -> None:
    with pytest.raises(ValueError):
        MerkleTree(cached_from=0)
