"""Read a local data file into columns, naming the file and line of anything unreadable.

Accepted files: ``.jsonl`` (one JSON object per line), ``.json`` (a list of objects, an object
of equal-length column lists, or JSON lines), ``.csv`` (a header line, then one record per
line; every value is text) and ``.parquet``. Text files must be UTF-8 (a byte-order mark is
allowed). A row of a text file is named by its 1-based line (``d.jsonl, line 4``), a row of
a parquet file or a JSON list by its 0-based index (``d.parquet, row index 3``).

Every problem is a :class:`~rlvr.errors.DataError` that names the file (and the line):
a missing or empty file, a non-UTF-8 byte, malformed JSON, a CSV record with the wrong number
of fields, an unreadable parquet file.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.errors import DataError

EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")


@dataclass(frozen=True)
class Table:
    """Rows of a data source, column by column.

    ``source`` is what messages name (a path, or a dataset and split); ``available`` every
    column of the source; ``columns`` the loaded ones (a subset of ``available``), each a list
    of ``n_rows`` values (None where a row lacks the key); ``lines`` the 1-based line of each
    row in a text file, or None when rows are named by their 0-based ``index_name``.
    """

    source: str
    available: tuple[str, ...]
    columns: dict[str, list[Any]]
    n_rows: int
    lines: tuple[int, ...] | None = None
    index_name: str = "row index"

    def where(self, row: int) -> str:
        """Where row ``row`` (0-based) is, for messages: "d.jsonl, line 4"."""
        if self.lines is not None:
            return f"{self.source}, line {self.lines[row]}"
        return f"{self.source}, {self.index_name} {row}"


def describe(value: Any) -> str:
    """A short description of a value for messages: "list [2, 3]", "dict {'a': 1}"."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def read_file(path: str) -> Table:
    """Every column of a local data file (see the module docstring).

    Raises DataError for a missing or empty file, an unsupported extension, a non-UTF-8 byte,
    malformed JSON or CSV (naming the line), or an unreadable parquet file.
    """
    if not os.path.isfile(path):
        raise DataError(f"data file not found: {path}")
    ext = os.path.splitext(path)[1].lower()
    if ext not in EXTENSIONS:
        raise DataError(
            f"unsupported file extension {ext!r} for {path}; accepted: {', '.join(EXTENSIONS)}"
        )
    if ext == ".parquet":
        table = _read_parquet(path)
    else:
        text = _decode(path)
        if not text.strip():
            raise DataError(f"data file {path} is empty: {_EXPECTED[ext]}")
        table = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv}[ext](path, text)
    if table.n_rows == 0:
        raise DataError(f"data file {path} has no rows: {_EXPECTED[ext]}")
    return table


def read_columns(path: str, columns: Sequence[str]) -> dict[str, list[Any]]:
    """The named columns of a local data file as lists (None where a row lacks the key).

    Raises DataError as :func:`read_file`, or naming a missing column and the available ones.
    """
    table = read_file(path)
    for column in columns:
        if column not in table.columns:
            raise DataError(
                f"column {column!r} not found in {path}; available columns: {list(table.available)}"
            )
    return {column: table.columns[column] for column in columns}


_EXPECTED = {
    ".jsonl": 'expected one JSON object per line, e.g. {"prompt": "...", "answer": "..."}',
    ".json": "expected a list of JSON objects (one per row), or JSON lines",
    ".csv": "expected a header line (e.g. prompt,answer), then one row per line",
    ".parquet": "expected at least one row",
}


def _decode(path: str) -> str:
    """The file's text; DataError naming the line and byte of the first non-UTF-8 byte."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - data.rfind(b"\n", 0, err.start)
        raise DataError(
            f"{path}, line {line}: byte 0x{data[err.start]:02x} (byte {column} of the line) is "
            "not valid UTF-8; save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from None


def _from_records(
    source: str, records: list[dict[str, Any]], lines: tuple[int, ...] | None, index_name: str
) -> Table:
    """A table of row dicts; columns in order of first appearance, None where a row lacks one."""
    names = list(dict.fromkeys(key for record in records for key in record))
    columns = {name: [record.get(name) for record in records] for name in names}
    return Table(source, tuple(names), columns, len(records), lines, index_name)


def _read_jsonl(path: str, text: str) -> Table:
    """One JSON object per non-blank line."""
    records, lines = [], []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(
                f"{path}, line {number}: not valid JSON ({err.msg} at character {err.colno}); "
                f"{_EXPECTED['.jsonl']}"
            ) from None
        if not isinstance(value, dict):
            raise DataError(f"{path}, line {number}: expected a JSON object, got {describe(value)}")
        records.append(value)
        lines.append(number)
    return _from_records(path, records, tuple(lines), "row index")


def _read_json(path: str, text: str) -> Table:
    """A list of objects, an object of equal-length column lists, one object, or JSON lines."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":  # several values: JSON lines in a .json file
            return _read_jsonl(path, text)
        raise DataError(
            f"{path}, line {err.lineno}, column {err.colno}: not valid JSON ({err.msg})"
        ) from None
    if isinstance(value, dict):
        lengths = {len(v) if isinstance(v, list) else -1 for v in value.values()}
        if len(lengths) == 1 and -1 not in lengths:  # columns
            n_rows = lengths.pop()
            return Table(path, tuple(value), value, n_rows, None, "row index")
        value = [value]
    if not isinstance(value, list):
        raise DataError(f"{path}: {_EXPECTED['.json']}, got {describe(value)}")
    for index, record in enumerate(value):
        if not isinstance(record, dict):
            raise DataError(
                f"{path}, item index {index}: expected a JSON object, got {describe(record)}"
            )
    return _from_records(path, value, None, "item index")


def _read_csv(path: str, text: str) -> Table:
    """A header line, then records (quoted fields may span lines); blank lines are skipped."""
    # a field may be as long as the file: a long prompt is reported later, with its length
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    records, lines = [], []
    try:
        while True:
            start = reader.line_num + 1
            record = next(reader, None)
            if record is None:
                break
            if not record:
                continue
            if header is None:
                header = [name.strip() for name in record]
                repeated = sorted({name for name in header if header.count(name) > 1})
                if repeated:
                    raise DataError(f"{path}, line {start}: repeated column names {repeated}")
                continue
            if len(record) != len(header):
                raise DataError(
                    f"{path}, line {start}: {len(record)} fields, but the header has "
                    f"{len(header)} ({', '.join(header)}); quote fields that contain commas"
                )
            records.append(dict(zip(header, record, strict=True)))
            lines.append(start)
    except csv.Error as err:
        raise DataError(f"{path}, line {reader.line_num}: malformed CSV ({err})") from None
    table = _from_records(path, records, tuple(lines), "row index")
    return Table(path, tuple(header or ()), table.columns, table.n_rows, table.lines)


def _read_parquet(path: str) -> Table:
    """Every column of a parquet file; rows are named by index."""
    import pyarrow
    import pyarrow.parquet

    try:
        arrow = pyarrow.parquet.read_table(path)
    except (pyarrow.ArrowException, OSError) as err:
        raise DataError(f"{path}: not a readable parquet file ({err})") from None
    columns = {name: arrow.column(name).to_pylist() for name in arrow.column_names}
    return Table(path, tuple(arrow.column_names), columns, arrow.num_rows)
