"""The errors rlvr reports to a user: a message that names the file, row, column or config key
and what was expected. The command line prints them without a traceback (``--debug`` shows it);
anything else that escapes is a bug in rlvr and is shown with its traceback.
"""

from __future__ import annotations


class RlvrError(Exception):
    """A user-facing error: bad config, data, model path, reward, or a run that cannot go on."""


class DataError(RlvrError, ValueError):
    """A data source (file, dataset, row, column) that cannot be used as it is."""


class NonFiniteError(RlvrError, FloatingPointError):
    """A run that produced non-finite losses, gradients or rewards too many steps in a row."""


class OutOfMemory(RlvrError, MemoryError):
    """A run that ran out of device (or host) memory; the message names the settings to lower."""


class WorkerFailed(RlvrError, RuntimeError):
    """A distributed run that cannot go on: a learner failed, or rollout workers failed more
    often than ``distributed.max_restarts``; the message says how to resume."""


class CollapseError(RlvrError, ArithmeticError):
    """A run whose policy collapsed (uniform over the vocabulary, or a gradient of exactly zero)
    too many steps in a row (``train.max_collapsed_steps``)."""


class RunDirError(RlvrError, OSError):
    """A run or checkpoint directory that cannot be written, or a disk without room for one
    checkpoint; found before the first step."""
