"""Tests that need a CUDA GPU. Every test collected under tests/gpu/ is marked ``gpu`` and, without
CUDA, skipped with the reason (deselect with -m "not gpu"). ``benchmarks/gpu_check.sh`` runs them
on a GPU machine, together with the throughput benchmarks."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

_HERE = Path(__file__).parent
NO_CUDA = "needs a CUDA GPU (torch.cuda.is_available() is False); run benchmarks/gpu_check.sh on a GPU machine"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (tests/gpu)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cuda = torch.cuda.is_available()
    for item in items:
        if _HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.gpu)
            if not cuda:
                item.add_marker(pytest.mark.skip(reason=NO_CUDA))
