"""Ctrl-C during start-up always stops ``rlvr train`` with exit status 130 and no traceback
(issue 24 part 8), also where library code loses the KeyboardInterrupt: ``import torch``
imports NumPy from C and clears any error of that import, so a Ctrl-C landing there was
swallowed and the run trained to its end."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from test_trainer import TESTS, tiny_config
from typer.testing import CliRunner

import rlvr.trainer.run
from rlvr import interrupts
from rlvr.cli import app
from rlvr.config import build_config
from rlvr.models import ModelSpecError
from rlvr.trainer import train

# `rlvr train CONFIG` whose first import of NumPy (by torch's C extension) is hit by a SIGINT
CTRL_C_IN_TORCH_IMPORT = """
import os, signal, sys

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy":
            sys.meta_path.remove(self)
            print("sending SIGINT", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = ["rlvr", "train", sys.argv[1]]
from rlvr.cli import app
app()
"""


@pytest.fixture
def recorded_sigint():
    """A command of the command line running in this process: SIGINT recorded by
    rlvr.interrupts; Python's own handler back afterwards."""
    old = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupts.end_command()
    interrupts.start_command()
    yield
    interrupts.end_command()
    signal.signal(signal.SIGINT, old)


def _swallowing_sigint(real):
    """``real`` after a SIGINT that library code swallowed (``except BaseException: pass``)."""

    def wrapper(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here
        except BaseException:  # noqa: BLE001 - what the library did
            pass
        return real(*args, **kwargs)

    return wrapper


def test_the_handler_records_and_still_raises(recorded_sigint):
    assert not interrupts.received()
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    assert interrupts.received()
    with pytest.raises(KeyboardInterrupt):
        interrupts.check()
    interrupts.end_command()  # forgotten; and between commands nothing is recorded
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    assert not interrupts.received()
    interrupts.check()  # a later train() from Python is not stopped by it


def test_while_deferred_it_only_records(recorded_sigint):
    interrupts.end_command()
    interrupts.install(defer=True)  # the command line's own imports
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.1)  # nothing raised
    assert interrupts.received()
    interrupts.install()
    with pytest.raises(KeyboardInterrupt):
        interrupts.start_command()  # raised when the command starts


def test_ctrl_c_during_the_command_lines_imports_exits_130(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps(tiny_config(tmp_path / "run", steps=3)))
    code = (
        "import os, signal, sys, time\n"
        "import rlvr._record_sigint\n"
        "os.kill(os.getpid(), signal.SIGINT); time.sleep(0.1)  # while importing typer, rich\n"
        "from rlvr.cli import app\n"
        "sys.argv = ['rlvr', 'train', sys.argv[1]]\n"
        "app()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": TESTS},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert out.returncode == 130 and out.stderr == "interrupted\n", out.stderr
    assert not (tmp_path / "run").exists()


def test_it_is_never_installed_over_an_ignored_sigint():
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # e.g. a job started with `&`
    try:
        interrupts.install()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)


def test_a_swallowed_ctrl_c_of_the_start_up_stops_before_the_first_step(
    tmp_path, monkeypatch, recorded_sigint
):
    monkeypatch.setattr(
        rlvr.trainer.run, "build_parts", _swallowing_sigint(rlvr.trainer.run.build_parts)
    )
    run_dir = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train(build_config(tiny_config(run_dir, steps=3)))
    assert not run_dir.exists()  # no step taken, nothing left behind


def test_cli_exits_130_on_a_swallowed_or_disguised_ctrl_c(tmp_path, monkeypatch, recorded_sigint):
    config = tmp_path / "c.json"
    config.write_text(json.dumps(tiny_config(tmp_path / "run", steps=3)))
    monkeypatch.setattr(
        rlvr.trainer.run, "build_parts", _swallowing_sigint(rlvr.trainer.run.build_parts)
    )
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code == 130, result.output
    assert "interrupted" in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()
    monkeypatch.undo()

    def disguise(error: Exception):
        def start(*args, **kwargs):  # Python 3.11's __set_name__, transformers' lazy imports,
            try:  # a model load turning it into ModelSpecError
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
            except KeyboardInterrupt as err:
                raise error from err

        return start

    for error in (RuntimeError("Error calling __set_name__"), ModelSpecError("cannot load")):
        monkeypatch.setattr(rlvr.trainer.run, "build_parts", disguise(error))
        result = CliRunner().invoke(app, ["train", str(config)])
        assert result.exit_code == 130, result.output
        assert "interrupted" in result.stderr and "error" not in result.stderr
        assert not interrupts.received()  # forgotten once the command ended
    monkeypatch.undo()
    result = CliRunner().invoke(app, ["train", str(config)])  # a later command is not affected
    assert result.exit_code == 0, result.output


def test_ctrl_c_while_torch_imports_numpy_exits_130(tmp_path):
    """The root cause, deterministically: a SIGINT while torch's C extension imports NumPy."""
    config = tmp_path / "c.json"
    run_dir = tmp_path / "run"
    config.write_text(json.dumps(tiny_config(run_dir, steps=3)))
    out = subprocess.run(
        [sys.executable, "-c", CTRL_C_IN_TORCH_IMPORT, str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": TESTS},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # not inherited SIG_IGN
    )
    assert "sending SIGINT" in out.stderr  # NumPy was imported after the handler
    assert out.returncode == 130, out.stderr
    assert "interrupted" in out.stderr and "Traceback" not in out.stderr
    assert not run_dir.exists()


TRIES = int(os.environ.get("RLVR_SIGINT_TRIES", "0"))  # e.g. 40; each is one start-up (seconds)


@pytest.mark.skipif(not TRIES, reason="set RLVR_SIGINT_TRIES=40 to send Ctrl-C at random times")
def test_ctrl_c_at_a_random_time_of_the_start_up_exits_130(tmp_path):
    rng, failures, window = random.Random(0), [], float(os.environ.get("RLVR_SIGINT_WINDOW", "4"))
    for i in range(TRIES):
        run_dir = tmp_path / f"run{i}"
        config = tmp_path / f"c{i}.json"
        config.write_text(json.dumps(tiny_config(run_dir, steps=20, checkpoint={"every": 0})))
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlvr.cli", "train", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": TESTS},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        time.sleep(rng.uniform(0.3, window))
        started = (run_dir / "metrics.jsonl").exists()  # past the start-up: a stop request
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=300)[1]
        # -2: ended by SIGINT (a shell shows 130): CPython does so at exit when C code swallowed
        # a KeyboardInterrupt of code it ran (PyRun_*), whatever the exit status asked for
        if (
            proc.returncode not in (130, -2)
            or "Traceback" in err
            or (not started and run_dir.exists())
        ):
            failures.append(f"try {i}: exit {proc.returncode}\n{err[-1500:]}")
    assert not failures, f"{len(failures)}/{TRIES} tries:\n" + "\n".join(failures)
