"""Fixtures of the policy tests: the tiny local model and its tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_dir():
    from agentgym.policy.models import tiny_model_dir

    return tiny_model_dir()


@pytest.fixture(scope="session")
def tokenizer(tiny_dir):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(tiny_dir))
