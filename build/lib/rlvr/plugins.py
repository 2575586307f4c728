"""Plug-ins: Python modules that register parts (``@register_advantage``,
``@register_policy_loss``, ``@register_reward``, ...) so a config can select them by name.

Two sources, both imported before a config's names are checked:

* the config's top-level ``plugins: [module, ...]``: a module name importable from
  ``sys.path``, a module file or package next to the config file (``my_parts`` for
  ``my_parts.py`` beside it), or a path to a ``.py`` file. A plug-in found next to the config
  is recorded in the run's ``config.yaml`` as the file's absolute path, so ``rlvr train
  --resume`` finds it from any directory;
* installed packages that declare an entry point in the group ``rlvr.plugins`` (in their
  ``pyproject.toml``: ``[project.entry-points."rlvr.plugins"] my_parts = "my_pkg.parts"``),
  imported once per process.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from rlvr.errors import RlvrError

ENTRY_POINT_GROUP = "rlvr.plugins"
_entry_points_loaded = False


class PluginError(RlvrError, ValueError):
    """A plug-in that cannot be found or raises while it is imported."""


def load_entry_points() -> list[str]:
    """Import every installed ``rlvr.plugins`` entry point (once per process); their names."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return []
    _entry_points_loaded = True
    names = []
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            point.load()
        except Exception as err:  # noqa: BLE001 - a broken plug-in is named, not hidden
            raise PluginError(
                f"plug-in entry point {point.name!r} ({point.value}) of group "
                f"{ENTRY_POINT_GROUP!r} raised {type(err).__name__}: {err}"
            ) from err
        names.append(point.name)
    return names


def _import_file(path: Path) -> ModuleType:
    """Import a module file under its stem (a package directory: its ``__init__.py``); the
    same file is imported once."""
    path = path.resolve()
    init = path / "__init__.py" if path.is_dir() else path
    name = path.stem if path.suffix == ".py" else path.name
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == init:
        return loaded
    if loaded is not None:  # another module of that name: import this file under its own
        name = f"rlvr_plugin_{hashlib.sha1(str(init).encode()).hexdigest()[:12]}_{name}"
        if name in sys.modules:
            return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[str(path)] if path.is_dir() else None
    )
    if spec is None or spec.loader is None:
        raise PluginError(f"plug-in {str(path)!r} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def resolve_plugin(entry: str, base_dir: Path | None) -> str:
    """How ``entry`` is recorded: the absolute path of a ``.py`` file (given as a path, or a
    module found next to the config in ``base_dir``), else the module name itself."""
    if entry.endswith(".py") or "/" in entry or "\\" in entry:
        path = Path(entry).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.exists():
            where = f" (looked in {base_dir})" if base_dir is not None else ""
            raise PluginError(f"plug-in {entry!r}: no such file{where}")
        return str(path.resolve())
    if base_dir is not None and "." not in entry:
        if (base_dir / f"{entry}.py").is_file():
            return str((base_dir / f"{entry}.py").resolve())
        if (base_dir / entry / "__init__.py").is_file():
            return str((base_dir / entry).resolve())
    return entry


def load_plugin(entry: str) -> ModuleType:
    """Import one resolved plug-in (:func:`resolve_plugin`); PluginError naming it when it is
    missing or raises."""
    try:
        if entry.endswith(".py") or Path(entry).is_absolute():
            return _import_file(Path(entry))
        return importlib.import_module(entry)
    except PluginError:
        raise
    except ModuleNotFoundError as err:
        if err.name == entry or entry.startswith(f"{err.name}."):
            raise PluginError(
                f"plug-in {entry!r}: no module of that name on sys.path, nor a {entry}.py next "
                "to the config file"
            ) from None
        raise PluginError(f"plug-in {entry!r}: importing it failed: {err}") from err
    except Exception as err:  # noqa: BLE001 - any error in the user's module is reported
        raise PluginError(f"plug-in {entry!r} raised {type(err).__name__}: {err}") from err


def load_plugins(entries: list[str], base_dir: Path | None) -> list[str]:
    """Import the entry points and ``entries`` (a config's ``plugins``, relative to
    ``base_dir``, the config file's directory); return the entries as recorded."""
    load_entry_points()
    resolved = [resolve_plugin(entry, base_dir) for entry in entries]
    for entry in resolved:
        load_plugin(entry)
    return resolved
