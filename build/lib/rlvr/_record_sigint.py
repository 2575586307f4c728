"""Imported first of all by :mod:`rlvr.cli`: a Ctrl-C during the command line's own imports is
recorded instead of raised there (a traceback out of ``import``), and raised as soon as the
command starts (:func:`rlvr.interrupts.start_command`: "interrupted", exit status 130). At the end of its
imports :mod:`rlvr.cli` makes Ctrl-C raise again."""

from rlvr import interrupts

interrupts.install(defer=True)
