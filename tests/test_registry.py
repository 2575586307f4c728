"""The one registry mechanism: lazy ``module:attr`` entries, built-in modules imported on first
read, idempotent re-registration, and families ``PREFIX<placeholder>``; every lazy entry the
catalog declares imports to what it names."""

from __future__ import annotations

import importlib
import sys

import pytest

from rlvr.catalog import BACKENDS, ENVS, TASKS
from rlvr.registry import Lazy, Registry


def test_a_lazy_entry_is_imported_when_first_looked_up(monkeypatch):
    monkeypatch.delitem(sys.modules, "json.tool", raising=False)
    registry: Registry = Registry("thing")
    registry.add_lazy("tool", "json.tool:main", "json's command line")
    assert "tool" in registry and "json.tool" not in sys.modules  # listed, not imported
    assert registry.descriptions["tool"] == "json's command line"
    import json.tool

    assert registry["tool"] is json.tool.main and registry.get("tool") is json.tool.main
    with pytest.raises(ValueError, match="'module:attr'"):
        registry.add_lazy("bad", "json.tool")
    with pytest.raises(ValueError, match="thing 'tool' is already registered"):
        registry.add("tool", object())


def test_modules_register_the_built_ins_on_first_read_and_same_allows_a_second_import(
    tmp_path, monkeypatch
):
    (tmp_path / "builtins_for_registry_test.py").write_text(
        "from test_registry import SHAPES\ndef square(): return 4\nSHAPES.add('square', square)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert dict.__len__(SHAPES) == 0  # nothing imported yet
    assert list(SHAPES) == ["square"] and SHAPES["square"]() == 4
    first = SHAPES["square"]
    module = importlib.reload(sys.modules["builtins_for_registry_test"])  # imported again
    assert SHAPES["square"] is module.square is not first
    with pytest.raises(ValueError, match="already registered"):
        SHAPES.add("square", print)


SHAPES: Registry = Registry(
    "shape",
    modules=("builtins_for_registry_test",),
    same=lambda old, new: (old.__module__, old.__qualname__) == (new.__module__, new.__qualname__),
)


def test_a_family_entry_finds_its_names_with_their_id():
    assert ENVS.lookup("calculator") == ("calculator", None)
    assert ENVS.lookup("gem:game:GuessTheNumber-v0") == ("gem:<env_id>", "game:GuessTheNumber-v0")
    assert ENVS.lookup("gem:") is None and ENVS.lookup("nope") is None
    assert TASKS.lookup("reasoning_gym:chain_sum") == ("reasoning_gym:<name>", "chain_sum")


@pytest.mark.parametrize(
    "registry, name",
    [(r, n) for r in (TASKS, ENVS, BACKENDS) for n in dict.keys(r)],
)
def test_every_lazy_entry_of_the_catalog_names_what_exists(registry, name):
    """A typo in a built-in's ``module:attr`` fails here, not in a user's run."""
    import importlib.util

    entry = dict.__getitem__(registry, name)
    if not isinstance(entry, Lazy):
        return
    module = entry.target.split(":")[0]
    assert importlib.util.find_spec(module) is not None, entry.target
    loaded = importlib.import_module(module)
    assert hasattr(loaded, entry.target.split(":")[1]), entry.target
    assert registry.descriptions.get(name), name  # listed with what it is


def test_a_module_that_failed_to_register_is_imported_again_and_a_registry_pickles(
    tmp_path, monkeypatch
):
    import pickle

    module = tmp_path / "flaky_for_registry_test.py"
    module.write_text("raise ImportError('not yet')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry: Registry = Registry("part", modules=("flaky_for_registry_test",))
    with pytest.raises(ImportError, match="not yet"):
        list(registry)
    module.write_text("from test_registry import LATE\nLATE.add('late', 1)\n")
    monkeypatch.delitem(sys.modules, "flaky_for_registry_test", raising=False)
    importlib.invalidate_caches()
    LATE._modules = ("flaky_for_registry_test",)
    LATE._loaded = False
    assert list(LATE) == ["late"]
    assert list(registry) == []  # its module registered into LATE, not here: nothing to list
    again = pickle.loads(pickle.dumps(LATE))
    assert dict(again.items()) == {"late": 1} and again.kind == "part"


LATE: Registry = Registry("part")
