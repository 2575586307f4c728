"""What ``task.path`` names: a local data file, a dataset directory, or a hub dataset name.

* a ``.jsonl`` / ``.json`` / ``.csv`` / ``.parquet`` file (:mod:`rlvr.data.tables`): one table;
  hold rows out with a split column or a fraction;
* a directory written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``, a directory
  of data files, or a hub name such as ``openai/gsm8k`` read from the local cache
  (:mod:`rlvr.data.hub`): ``split`` picks the table to train on, ``eval_split`` (optional) a
  table held out, ``subset`` the dataset's configuration ("main").
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from rlvr.data.hub import is_hub_name, read_dataset_splits
from rlvr.data.tables import EXTENSIONS, Table, read_file
from rlvr.errors import DataError


def read_source(
    path: str,
    columns: Sequence[str],
    split: str = "train",
    eval_split: str | None = None,
    subset: str | None = None,
) -> tuple[Table, Table | None]:
    """The training table and the held-out table (``eval_split``; else None) at ``path``.

    A file's table has every column; a dataset's tables have those of ``columns`` they hold
    (``Table.available`` lists all). Raises DataError naming the path for a source that is not
    found or cannot be read, or a split/subset that does not apply to a single file.
    """
    if os.path.isfile(path):
        if split != "train" or eval_split is not None or subset is not None:
            raise DataError(
                f"{path} is a single file: task.split, task.eval_split and task.subset apply to "
                "datasets (a save_to_disk directory or a hub name); hold rows out of a file with "
                "task.split_column or task.eval_fraction"
            )
        return read_file(path), None
    is_file_name = os.path.splitext(path)[1].lower() in EXTENSIONS
    if os.path.isdir(path) or (is_hub_name(path) and not is_file_name):
        splits = [split] + ([eval_split] if eval_split is not None else [])
        tables = read_dataset_splits(path, subset, splits, columns)
        return tables[split], tables.get(eval_split) if eval_split is not None else None
    raise DataError(f"data file not found: {path}")
