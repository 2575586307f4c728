"""The code sandbox: run model-written Python in a separate, confined process.

- :mod:`rlvr.sandbox.sandbox`: :func:`run_python` (a fresh confined process per call: rlimits,
  a dedicated uid, namespaces, a file view of its own, a control group, a seccomp filter, a
  wall-time deadline), :class:`SandboxLimits`, :class:`SandboxResult`, :class:`SandboxError`;
- :mod:`rlvr.sandbox.seccomp`: the seccomp-BPF filter (the system calls that kill a program);
- :mod:`rlvr.sandbox.cgroups`: a control group per run (memory, processes and CPU time of the
  whole process tree);
- ``_sandbox_zygote.py`` (a pre-started interpreter, one per trainer process, that forks a
  run's processes), ``_sandbox_launcher.py`` (the supervisor of one run, in the zygote's
  fork) and ``_sandbox_boot.py`` (the program's first Python code): source text given to
  ``python -I -S -B -c``, never imported by the trainer.

The code reward (:mod:`rlvr.rewards.code`) and the agent tools (:mod:`rlvr.envs.tools`) run
their programs here. docs/sandbox.md describes what confines a run and what does not.
"""

from rlvr.sandbox.sandbox import (
    SandboxError,
    SandboxLimits,
    SandboxResult,
    remove_tree,
    run_python,
)

__all__ = ["SandboxError", "SandboxLimits", "SandboxResult", "remove_tree", "run_python"]
