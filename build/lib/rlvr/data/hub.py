"""Hugging Face datasets as tables: a directory written by ``save_to_disk``, a directory of data
files (a dataset repository checked out locally), or a hub name such as ``openai/gsm8k``.

Hub names are read **offline**, from the local datasets cache only (``HF_DATASETS_CACHE``,
default ``~/.cache/huggingface/datasets``): a run reads exactly the data on its machine, and a
name that is not there is an immediate error instead of minutes of network retries. Fill the
cache on a machine with internet (``datasets.load_dataset("openai/gsm8k", "main")``), or
``save_to_disk`` the dataset and point ``task.path`` at that directory.

Rows are named by split and 0-based index: ``openai/gsm8k (split 'train'), row index 12``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rlvr.data.tables import Table
from rlvr.errors import DataError

if TYPE_CHECKING:  # imported where a dataset is read: `datasets` (and pandas) take seconds
    import datasets

_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(?:/[\w.-]+)?")
_SAVED_MARKERS = ("dataset_dict.json", "state.json")  # written by save_to_disk


def is_hub_name(path: str) -> bool:
    """True if ``path`` could name a hub dataset ("gsm8k", "openai/gsm8k")."""
    return _HUB_NAME.fullmatch(path) is not None


def read_dataset_splits(
    path: str, subset: str | None, splits: Sequence[str], columns: Sequence[str]
) -> dict[str, Table]:
    """The ``splits`` of the dataset at ``path`` (a directory or a hub name), each a table of
    those ``columns`` it has (every column name is in ``Table.available``).

    A dataset saved without splits (``Dataset.save_to_disk``) is one table, returned for the
    split "train" only. Raises DataError naming the dataset for a name not found locally, an
    unknown subset or split, an unreadable directory, or a split without rows.
    """
    import datasets

    loaded = _load(path, subset)
    tables = {}
    for split in splits:
        if isinstance(loaded, datasets.Dataset):
            if split != "train":
                raise DataError(
                    f"{path} is one dataset without splits (written by Dataset.save_to_disk), so "
                    f"it has no split {split!r}: leave task.split at 'train' and task.eval_split "
                    "unset, and hold out rows with task.split_column or task.eval_fraction"
                )
            ds, source = loaded, path
        elif split not in loaded:
            raise DataError(
                f"{path} has no split {split!r} (task.split / task.eval_split); available splits: "
                f"{', '.join(loaded)}"
            )
        else:
            ds, source = loaded[split], f"{path} (split {split!r})"
        if len(ds) == 0:
            raise DataError(f"{source} has no rows")
        wanted = [column for column in columns if column in ds.column_names]
        data: dict[str, list[Any]] = ds.select_columns(wanted).to_dict()
        tables[split] = Table(source, tuple(ds.column_names), data, len(ds))
    return tables


def _load(path: str, subset: str | None) -> datasets.Dataset | datasets.DatasetDict:
    """The dataset at ``path``: ``load_from_disk`` for a save_to_disk directory, else
    ``load_dataset`` offline (a directory of data files, or a hub name in the local cache)."""
    import datasets
    from datasets.exceptions import DatasetsError

    saved = os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, marker)) for marker in _SAVED_MARKERS
    )
    if saved:
        if subset is not None:
            raise DataError(
                f"{path} is a directory written by save_to_disk, which has no subsets: unset "
                f"task.subset (got {subset!r})"
            )
        try:
            return datasets.load_from_disk(path)
        except (OSError, ValueError, DatasetsError) as err:
            raise DataError(f"{path}: cannot read this save_to_disk directory ({err})") from None
    try:
        with _hub_offline():
            return datasets.load_dataset(path, subset)
    except (OSError, DatasetsError) as err:
        if os.path.isdir(path):
            raise DataError(
                f"{path} is a directory, but neither a dataset written by save_to_disk nor data "
                f"files that datasets can read ({err})"
            ) from None
        raise DataError(_not_found(path, subset)) from None
    except ValueError as err:
        which = f" subset {subset!r} of" if subset is not None else ""
        raise DataError(
            f"cannot load{which} dataset {path!r} from the local cache: {err}\n(set task.subset "
            "to one of the dataset's subsets, e.g. task.subset: main for openai/gsm8k)"
        ) from None


def _not_found(path: str, subset: str | None) -> str:
    """The message for a dataset that is neither on disk nor in the local cache."""
    import datasets

    args = repr(path) + (f", {subset!r}" if subset is not None else "")
    return (
        f"dataset {path!r} not found locally: no file or directory of that name, and not in the "
        f"Hugging Face datasets cache ({datasets.config.HF_DATASETS_CACHE}). rlvr reads hub "
        "datasets offline, from that cache only. On a machine with internet, fill the cache "
        f'with `python -c "import datasets; datasets.load_dataset({args})"` (same HF_HOME), or '
        "save the dataset with `.save_to_disk(DIR)` and set task.path: DIR"
    )


@contextlib.contextmanager
def _hub_offline() -> Iterator[None]:
    """Hugging Face hub offline mode for the duration (read at call time by ``datasets`` and
    ``huggingface_hub``), so a dataset missing from the cache fails at once."""
    import datasets
    import huggingface_hub.constants as hub_constants

    saved = datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved
