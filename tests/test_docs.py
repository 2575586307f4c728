"""The documentation tells the truth: its marked examples run, its links resolve.

Convention for runnable examples: a line ``<!-- runnable -->`` (an HTML comment, invisible on
GitHub) directly before a fenced code block whose language is ``bash`` or ``python`` marks the
block as runnable. Every marked block of README.md and docs/*.md runs on its own, in a fresh
temporary directory, exactly as a reader would paste it:

* python blocks with this virtual environment's interpreter;
* bash blocks with ``bash -e -o pipefail`` and the environment's ``bin/`` first on PATH (so
  ``rlvr`` and ``python`` are the project's);

and must exit 0. Their ``rlvr`` commands and the python blocks start through a fork server that
has imported what a command imports (tests/cli_forkserver.py: the same command, without 4.5 s
of imports each; ``test_the_launcher_runs_rlvr_as_the_installed_script_does`` and
``test_the_python_launcher_runs_a_script_as_python_does`` hold it to that). The examples
themselves use the tiny in-process model and a few steps (and say
what to use for a real run), so nothing is rewritten here. ``RLVR_CACHE`` is the test session's
(tests/conftest.py), so the tiny models are built once; hub access is off and torch uses one
thread (faster for tiny models on a busy machine). A failing block is named by file and line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- runnable -->"
LANGUAGES = ("bash", "python")
BLOCK_TIMEOUT_S = 300
PYTHON_LAUNCHER = "RLVR_TEST_PYTHON_LAUNCHER"
"""The key of :func:`rlvr_launcher`'s ``python`` launcher (also set in the blocks' environment,
where nothing reads it)."""


@dataclass(frozen=True)
class Block:
    """A runnable code block: the file, the 1-based line of its opening fence, its language and
    its code."""

    path: Path
    line: int
    language: str
    code: str

    @property
    def where(self) -> str:
        """``README.md:129``: the file (relative to the repository) and line."""
        name = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{name}:{self.line}"


def runnable_blocks(path: Path, text: str | None = None) -> list[Block]:
    """The blocks of a markdown file marked runnable, in order.

    Raises ValueError naming the line of a marker that is not directly followed by a
    ```bash or ```python fence, or of a marked block that is never closed.
    """
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        fence = lines[i + 1].strip() if i + 1 < len(lines) else ""
        language = fence[3:].strip()
        if not fence.startswith("```") or language not in LANGUAGES:
            raise ValueError(
                f"{path}:{i + 1}: {MARKER} must be followed by a ```bash or ```python fence, "
                f"got {fence!r}"
            )
        end = next((j for j in range(i + 2, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{path}:{i + 2}: the runnable block is never closed")
        code = "\n".join(lines[i + 2 : end]) + "\n"
        blocks.append(Block(path, i + 2, language, code))
    return blocks


def all_blocks() -> list[Block]:
    return [block for path in DOCS for block in runnable_blocks(path)]


def block_env() -> dict[str, str]:
    """The environment of the runnable examples: this virtual environment's ``bin/`` first on
    PATH, hub access off, one torch thread."""
    bin_dir = Path(sys.executable).parent
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",  # tiny models: threads only contend with each other
    }


@pytest.fixture(scope="session")
def rlvr_launcher():
    """The examples' ``rlvr`` and ``python`` through a fork server (tests/cli_forkserver.py) of
    this test worker, started with the examples' environment: the environment variables to add
    (a directory holding the ``rlvr`` launcher first on the examples' PATH) and, under
    ``PYTHON_LAUNCHER``, the launcher that runs a python block."""
    from cli_forkserver import start

    server = start(block_env())
    path = block_env()["PATH"]
    yield {"PATH": f"{server.rlvr.parent}{os.pathsep}{path}", PYTHON_LAUNCHER: str(server.python)}
    server.close()


def run_block(
    block: Block, workdir: Path, launcher: dict[str, str] | None = None
) -> tuple[int | None, str]:
    """Run ``block`` in ``workdir`` (see the module docstring): its exit status (None if it ran
    over ``BLOCK_TIMEOUT_S``; its whole process group is then killed) and its output.
    ``launcher``: environment variables that put :func:`rlvr_launcher`'s ``rlvr`` first."""
    env = {**block_env(), **(launcher or {})}
    if block.language == "python":
        script = workdir / "example.py"
        command = [(launcher or {}).get(PYTHON_LAUNCHER, sys.executable), str(script)]
    else:
        script = workdir / "example.sh"
        command = ["bash", "-e", "-o", "pipefail", str(script)]
    script.write_text(block.code, encoding="utf-8")
    with subprocess.Popen(
        command,
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so a timeout ends every child too
    ) as process:
        try:
            output, _ = process.communicate(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            return None, output
    return process.returncode, output


def test_runnable_blocks_finds_marked_fences_only(tmp_path):
    text = (
        "# title\n"
        "```bash\nnot marked\n```\n"
        "<!-- runnable -->\n"
        "```bash\necho one\necho two\n```\n"
        "text\n"
        "<!-- runnable -->\n"
        "```python\nprint(1)\n```\n"
    )
    blocks = runnable_blocks(tmp_path / "x.md", text)
    assert [(b.line, b.language, b.code) for b in blocks] == [
        (6, "bash", "echo one\necho two\n"),
        (12, "python", "print(1)\n"),
    ]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("<!-- runnable -->\n\n```bash\necho\n```\n", "must be followed by"),
        ("<!-- runnable -->\n```yaml\na: 1\n```\n", "must be followed by"),
        ("<!-- runnable -->\n```bash\necho\n", "never closed"),
    ],
)
def test_runnable_blocks_rejects_a_misplaced_marker(tmp_path, text, problem):
    with pytest.raises(ValueError, match=problem):
        runnable_blocks(tmp_path / "x.md", text)


def test_docs_mark_their_examples_runnable():
    # the README's Python quickstart, and the examples that moved from the README to docs/
    # (data.md: your own file, a Hugging Face dataset; python-api.md; runs.md; objectives.md: SFT
    # on a file; lora.md: an adapter trained further): losing a marker must not silently stop
    # testing them
    assert [b.language for b in runnable_blocks(ROOT / "README.md")] == ["python"]
    blocks = {path.name: runnable_blocks(path) for path in DOCS[1:]}
    assert [b.language for b in blocks["data.md"]] == ["bash", "bash"]
    assert [b.language for b in blocks["python-api.md"]] == ["python", "python"]
    assert [b.language for b in blocks["runs.md"]] == ["bash"]
    code = "".join(b.code for path in DOCS for b in runnable_blocks(path))
    assert "completion_column:" in code and "--set model.lora.path=" in code


def test_readme_opens_with_make_demo_and_make_test():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.search(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)
    assert first is not None
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert commands == ["make demo", "make test"]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(path):
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not broken, f"{path.name}: broken links:\n  " + "\n  ".join(broken)


def test_docs_cite_the_design_document_that_exists():
    assert (ROOT / "docs" / "design.md").is_file()
    for path in DOCS:
        assert "DESIGN.md" not in path.read_text(encoding="utf-8"), path.name


def _launch(argv: list[str], cwd: Path, extra: dict[str, str] | None = None, **kwargs):
    return subprocess.Popen(
        argv, cwd=cwd, env={**block_env(), **(extra or {})}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, **kwargs,
    )  # fmt: skip


LONG_RUN = (
    "model: {name: tiny-random-llama}\n"
    "rollout: {group_size: 2, prompts_per_step: 2, max_new_tokens: 4}\n"
    "train: {steps: 1000}\n"
    "eval: {before: false, after: false}\n"
    "logging: {run_dir: runs/long, progress: false}\n"
    "checkpoint: {every: 0}\n"
)


def _started(run_dir: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while (
        not (run_dir / "metrics.jsonl").is_file() or not (run_dir / "metrics.jsonl").stat().st_size
    ):
        assert time.monotonic() < deadline, "the run never logged a step"
        time.sleep(0.2)


def test_the_launcher_runs_rlvr_as_the_installed_script_does(tmp_path, rlvr_launcher):
    """The docs' fork-server ``rlvr`` (tests/cli_forkserver.py) gives a command's output and
    exit status as the installed script does, a SIGINT reaches the command (which checkpoints
    and exits 130), and a killed launcher ends its command."""
    import psutil

    for args in (["tasks"], ["train", "missing.yaml"]):
        real = _launch(["rlvr", *args], tmp_path)
        real_out = real.communicate()
        forked = _launch(["rlvr", *args], tmp_path, rlvr_launcher)
        forked_out = forked.communicate()
        assert (forked.returncode, *forked_out) == (real.returncode, *real_out), args
    (tmp_path / "long.yaml").write_text(LONG_RUN)
    run = _launch(["rlvr", "train", "long.yaml"], tmp_path, rlvr_launcher)
    _started(tmp_path / "runs" / "long")
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130 and "--resume" in out + err, out + err

    def commands() -> list[psutil.Process]:  # processes working in this test's directory
        found = []
        for proc in psutil.process_iter(["cwd"]):
            if proc.info["cwd"] == str(tmp_path) and proc.pid != os.getpid():
                found.append(proc)
        return found

    again = ["rlvr", "train", "long.yaml", "--set", "logging.run_dir=runs/again"]
    run = _launch(again, tmp_path, rlvr_launcher)
    _started(tmp_path / "runs" / "again")
    assert len(commands()) == 2, [(p.pid, p.cmdline()) for p in commands()]  # launcher, command
    run.kill()
    run.wait()
    deadline = time.monotonic() + 30
    while commands():
        assert time.monotonic() < deadline, f"the command outlived its launcher: {commands()}"
        time.sleep(0.2)


def test_the_python_launcher_runs_a_script_as_python_does(tmp_path, rlvr_launcher):
    """A python block through the fork server sees what ``python example.py`` shows it
    (``__name__``, ``argv``, ``sys.path[0]``, the working directory, the environment, pickling
    from ``__main__``), and exits with the same status and error."""
    (tmp_path / "helper_mod.py").write_text("VALUE = 7\n")
    script = tmp_path / "example.py"
    script.write_text(
        "import os, pickle, sys\n"
        "import helper_mod\n"
        "def f(): pass\n"
        "print(__name__, sys.argv, sys.path[0], os.getcwd(), helper_mod.VALUE)\n"
        "print(os.environ['HF_HUB_OFFLINE'], pickle.loads(pickle.dumps(f)) is f)\n"
        "print('to stderr', file=sys.stderr)\n"
        "if sys.argv[1:] == ['fail']:\n"
        "    raise ValueError('boom')\n"
        "sys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)\n"
    )
    python = rlvr_launcher[PYTHON_LAUNCHER]
    for args in ([], ["3"], ["fail"]):
        real = _launch([sys.executable, str(script), *args], tmp_path)
        real_out, real_err = real.communicate()
        forked = _launch([python, str(script), *args], tmp_path, rlvr_launcher)
        out, err = forked.communicate()
        assert (forked.returncode, out) == (real.returncode, real_out), args
        assert err.splitlines()[-1] == real_err.splitlines()[-1], (err, real_err)
    assert real.returncode == 1 and "ValueError: boom" in real_err


@pytest.mark.parametrize(
    "block",
    all_blocks(),
    ids=lambda b: b.where,
)
def test_runnable_block_succeeds(block, tmp_path, rlvr_launcher):
    status, output = run_block(block, tmp_path, rlvr_launcher)
    outcome = f"ran over {BLOCK_TIMEOUT_S} s" if status is None else f"exited {status}"
    assert status == 0, (
        f"{block.where}: the {block.language} block {outcome}\n"
        f"--- its code ---\n{block.code}--- its output (end) ---\n{output[-4000:]}"
    )


def _shipped() -> dict[str, tuple[Path, list[str]]]:
    """Every config a user is handed: configs/*.yaml, and each training arm of each repro claim
    (its config with the arm's ``set``), by a test id."""
    import yaml

    out = {path.stem: (path, []) for path in sorted((ROOT / "configs").glob("*.yaml"))}
    for claim in sorted((ROOT / "repro").glob("*/claim.yaml")):
        arms = yaml.safe_load(claim.read_text(encoding="utf-8"))["arms"]
        for arm, spec in arms.items():
            if "config" not in spec:  # an evaluated model, not a training run
                continue
            out[f"repro/{claim.parent.name}/{arm}"] = (
                claim.parent / spec["config"],
                spec.get("set", []),
            )
    return out


SHIPPED = _shipped()


def tiny_run(run_dir: Path, steps: int = 2) -> list[str]:
    """Overrides that run a shipped config on the tiny model for ``steps`` steps, groups of 2,
    no evaluation."""
    return [
        "model.name=tiny-random-llama",
        f"train.steps={steps}",
        "train.threads=1",
        "rollout.group_size=2",
        "rollout.prompts_per_step=2",
        "rollout.max_new_tokens=8",
        "eval.before=false",
        "eval.after=false",
        f"logging.run_dir={run_dir}",
        "logging.progress=false",
        "checkpoint.every=0",
        "checkpoint.save_final=false",
    ]


TRAINED_MODEL_TERMS = ("prm_steps", "reward_model")
"""Reward terms that read a model trained by ``rlvr rm train`` (``params.path``)."""


@pytest.fixture(scope="session")
def tiny_reward_model(tmp_path_factory) -> Path:
    """A reward model trained on the tiny model (8 pairs, one step): what a shipped config's
    ``rlvr rm train`` output stands for on the tiny model."""
    from rlvr.reward_models.train import RewardModelConfig, train_reward_model

    where = tmp_path_factory.mktemp("tiny-rm")
    rows = [
        {"prompt": f"What is {i} + 1?", "chosen": f"Answer: {i + 1}", "rejected": f"Answer: {i}"}
        for i in range(8)
    ]
    data = where / "pairs.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    config = RewardModelConfig(
        data=str(data), model="tiny-random-llama", out=str(where / "rm"), eval_fraction=0.0
    )
    train_reward_model(config, progress=False)
    return where / "rm"


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_config_trains_a_step_on_the_tiny_model(tmp_path, request, name):
    """Each config of configs/ and each repro arm loads as written and trains one step on the
    tiny model (a Ray config on the local backend: the Ray tests train through Ray; a trained
    reward model, a tiny one)."""
    from rlvr.config import load_config
    from rlvr.logging import read_metrics
    from rlvr.trainer import train

    path, arm = SHIPPED[name]
    cfg = load_config(path, arm)  # as written
    overrides = [*arm, *tiny_run(tmp_path / "run", steps=1), "distributed.backend=local"]
    if cfg.model.teacher is not None:  # distill's teacher: a checkpoint of the demo
        overrides.append("model.teacher=tiny-random-llama")
    # a judge model (judge_writing's SmolLM2) is the tiny one too
    overrides += [f"reward.judges.{judge}.model=tiny-random-llama" for judge in cfg.reward.judges]
    terms = [term.model_dump() for term in cfg.reward.terms]
    if any(term["name"] in TRAINED_MODEL_TERMS for term in terms):
        for term in terms:
            if term["name"] in TRAINED_MODEL_TERMS:
                term["params"]["path"] = str(request.getfixturevalue("tiny_reward_model"))
        overrides.append(f"reward.terms={json.dumps(terms)}")
    train(load_config(path, overrides))
    rows = [r for r in read_metrics(tmp_path / "run") if "policy/loss" in r]
    assert [r["step"] for r in rows] == [1]


def demo_quotes(record: dict) -> list[str]:
    """What the README must say of a ``bench/demo.py`` record: the greedy accuracy after
    training as its mean over the seeds and its range, and the mean wall time in minutes."""
    after = record["spread"]["after/eval/greedy_accuracy"]
    wall = record["spread"]["wall_minutes"]
    return [
        f"{after['mean']:.1%} ({after['min']:.1%}–{after['max']:.1%})",
        f"{wall['mean']:.1f} minutes",
        f"{len(record['runs'])} seeds",
    ]


def test_the_readme_quotes_the_recorded_demo():
    """The README's demo numbers are those of a committed ``bench/demo.py`` record (``make
    demo-record``), which names its machine and commit."""
    records = sorted((ROOT / "bench" / "results").glob("demo-*.json"))
    assert records, "no bench/results/demo-*.json: run `make demo-record`"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quoted = [
        r for r in records if all(q in readme for q in demo_quotes(json.loads(r.read_text())))
    ]
    assert quoted, f"the README quotes none of {[r.name for r in records]}: " + "; ".join(
        f"{r.name}: {demo_quotes(json.loads(r.read_text()))}" for r in records
    )
    for record in records:
        data = json.loads(record.read_text())
        assert data["device"].startswith("cpu (") and data["commit"] and len(data["runs"]) >= 3


def test_every_bench_result_names_its_machine():
    """Each committed benchmark result says which machine it ran on: the CPU's model (not only
    its architecture) or the GPU's name."""
    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        device = json.loads(path.read_text())["device"]
        assert re.fullmatch(r"(cpu \((?!x86_64\)|unknown).+\)|cuda \(.+\))", device), (
            f"{path.name}: device {device!r} names no machine"
        )
