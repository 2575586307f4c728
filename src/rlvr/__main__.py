"""``python -m rlvr``: the command line (what ``torchrun -m rlvr train ...`` starts)."""

from rlvr.cli import app

app()
