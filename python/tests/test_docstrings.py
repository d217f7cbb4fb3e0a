"""Every public name of the package says what it is: help() on it is never empty."""
import importlib
import inspect

import pytest


@pytest.mark.parametrize("module", ["hydraulis", "hydraulis.torch_data", "hydraulis.hf",
                                    "hydraulis.megatron"])
def test_every_public_name_has_a_docstring(module):
    if module != "hydraulis":
        pytest.importorskip("torch")
    if module == "hydraulis.hf":
        pytest.importorskip("accelerate")
    mod = importlib.import_module(module)
    missing = []
    for name in getattr(mod, "__all__", [n for n in dir(mod) if not n.startswith("_")]):
        obj = getattr(mod, name)
        if inspect.ismodule(obj) or not (inspect.isclass(obj) or callable(obj)):
            continue
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(obj) and obj.__module__.startswith("hydraulis"):
            for attr, value in vars(obj).items():
                if attr.startswith("_") or not (callable(value) or isinstance(value, property)):
                    continue
                if not (getattr(value, "__doc__", None) or "").strip():
                    missing.append(f"{name}.{attr}")
    assert not missing, f"{module}: no docstring on {missing}"
