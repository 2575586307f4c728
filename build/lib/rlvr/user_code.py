"""Importing a user's module by name (``module:function`` rewards, ``module:Class``
environments): the current directory is importable, and every failure is one clear error."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType


def import_user_module(module_name: str, label: str, error: type[Exception]) -> ModuleType:
    """Import ``module_name`` with the current directory on ``sys.path`` (appended, after the
    installed packages, so a local file cannot shadow one). Failures raise ``error`` with a
    message that starts with ``label`` (e.g. "reward 'my:fn'") and names what went wrong: the
    module not found (and where it was looked for), or an error while importing it."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)
        importlib.invalidate_caches()
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name == module_name or module_name.startswith(f"{err.name}."):
            raise error(
                f"{label}: no module named {err.name!r} in the current directory {cwd} (which "
                "is on sys.path) or on PYTHONPATH"
            ) from None
        raise error(f"{label}: importing module {module_name!r} failed: {err}") from err
    except Exception as err:  # noqa: BLE001 - any error in the user's module is reported
        raise error(
            f"{label}: importing module {module_name!r} raised {type(err).__name__}: {err}"
        ) from err
