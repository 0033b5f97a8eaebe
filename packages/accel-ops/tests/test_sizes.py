"""accel_ops.sizes.parse_size: one case per rule (Accelerate's convert_file_size_to_int)."""

from __future__ import annotations

import pytest

from accel_ops.sizes import parse_size


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # ints are bytes and pass through; floats are truncated
        (0, 0),
        (12345, 12345),
        (1.5, 1),
        (5e9, 5 * 10**9),
        # decimal units are powers of 1000
        ("1KB", 10**3),
        ("200MB", 200 * 10**6),
        ("10GB", 10 * 10**9),
        ("2TB", 2 * 10**12),
        # binary units are powers of 1024
        ("512KiB", 512 * 2**10),
        ("3MiB", 3 * 2**20),
        ("5GiB", 5 * 2**30),
        ("1TiB", 2**40),
        # B or no unit: bytes
        ("100B", 100),
        ("123", 123),
        # fractions, case and spaces
        ("1.5GB", 1_500_000_000),
        (".5KB", 500),
        ("5.KB", 5000),
        ("5GIB", 5 * 2**30),
        ("5gib", 5 * 2**30),
        (" 3 MiB ", 3 * 2**20),
        # a lowercase b after a decimal unit means bits (Accelerate's rule)
        ("5Gb", 625_000_000),
        ("5gb", 625_000_000),
        ("8Mb", 10**6),
        ("8kb", 1000),
        ("8Tb", 10**12),
        ("800b", 100),
        # ... but not after a binary unit
        ("5Gib", 5 * 2**30),
    ],
)
def test_sizes_in_bytes(given, expected):
    assert parse_size(given) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("5gb", 5 * 10**9),
        ("5Gb", 5 * 10**9),
        ("100b", 100),
        ("5GiB", 5 * 2**30),
        ("5GB", 5 * 10**9),
    ],
)
def test_without_bits_a_lowercase_b_is_bytes(given, expected):
    # how huggingface_hub reads max_shard_size (Accelerator.save_model, save_pretrained)
    assert parse_size(given, bits=False) == expected


@pytest.mark.parametrize(
    "given",
    ["GB", "10XB", "10K", "ten GB", "-5MB", "5 G B", "1e9", "", -1, -0.5, float("nan"), True, None],
)
def test_anything_else_is_refused_with_the_value_and_the_accepted_forms(given):
    with pytest.raises(ValueError, match=r"^limit=.* expected an int \(bytes\) .*'10GiB'.*bits"):
        parse_size(given, name="limit")


def test_the_bits_rule_is_only_named_when_it_applies():
    with pytest.raises(ValueError) as error:
        parse_size("lots", bits=False)
    assert str(error.value).startswith("size='lots' is not a size") and "bits" not in str(error)
