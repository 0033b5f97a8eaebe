"""Session-wide fixtures of the ecosystem tests (see ``ecosystem_support``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ecosystem_support import HF_PYTHON, build


@pytest.fixture(scope="session")
def hf_python() -> str:
    """The Hugging Face venv's interpreter (Accelerate 1.15 and the same transformers, peft, trl,
    datasets); the comparisons skip without it."""
    python = os.environ.get(HF_PYTHON)
    if not python:
        pytest.skip(
            f"{HF_PYTHON} is not set: point it at a Python with accelerate==1.15.0, torch==2.13.0 "
            "and the pins of noxfile.py's ECOSYSTEM, or run `nox -s ecosystem`, which builds that "
            "venv and sets it."
        )
    return python


@pytest.fixture(scope="session")
def assets(tmp_path_factory) -> Path:
    """The tiny model, tokenizer and texts, built once for every test."""
    root = tmp_path_factory.mktemp("assets")
    build(root)
    return root
