"""Reproductions of the papers' claims: arms x seeds, run, evaluated, compared, one table
(``rlvr repro``, ``make repro``; the claims live in ``repro/<claim>/claim.yaml``).

A claim folder holds ``claim.yaml`` and the configs of its arms::

    title: RL lifts pass@1, the base model catches up at large k
    paper: 'Yue et al. 2025, "Does Reinforcement Learning Really Incentivize ...", arXiv:2504.13837'
    claim: one sentence, what the paper reports
    seeds: [1, 2, 3]
    arms:
      rl: {config: rl.yaml}                           # trained: rlvr train, then evaluated
      base: {model: smollm2-135m-instruct, like: rl}  # not trained: evaluated like arm rl's runs
      sft_rl: {config: rl.yaml, after: sft}           # trained from arm sft's trained policy
                                                      # of the same seed (its exported model)
    eval: {n: 16, k: [1, 16]}      # rlvr eval of every run (omit: the metric comes from the
                                   # run's metrics.jsonl, its last logged value)
    compare: [rl, base]            # the paired difference a - b, seed by seed
    tests:                         # each: a summary metric of the eval (or a metrics.jsonl
      - {metric: pass@1, direction: greater}    # key, averaged over its `last: N` values),
      - {metric: pass@16, direction: less}      # the side of `margin` (0) the claim puts a - b
                                                # on, and its own `compare: [x, y]` if any
    rule: the decision rule in words, written before running
    minutes_per_run: 4             # this machine's cost of one run, for the estimate
    figure: policy/entropy         # optional: a metrics.jsonl key drawn per step, each trained
                                   # arm's seeds and their mean (RESULTS.md links the PNG)

Each run lives in ``<root>/<claim>/<arm>/seed<s>`` (``root``: ``runs/repro``, its checkpoints
and logs, not kept in git; the checkpoints are removed once the run's record is written, unless
``keep_checkpoints``). A finished run writes its *record*,
``repro/<claim>/results/<arm>/seed<s>.json``: the tests' metric values, the wall time, the
figure's curve, the machine, the run directory, and what ran: the commit and the time read at
the run's first start (``commit_start``, ``started``; kept in the run directory, so a resumed
run records those, not the resume's) and the SHA-256 of its resolved config
(``config_sha256``, :func:`config_sha256`). Records written before these keys existed carry
``commit``, read after the run, and still load. Records are small and committed with the
claim, so the table survives the run directories: a run with a record is finished and
skipped, a run directory without one is resumed.

The verdict of each test (:func:`verdict`): with d_s = metric_a(s) - metric_b(s) over the
seeds, shifted by the margin and turned to the claimed side, the exact sign-flip permutation
test (:func:`rlvr.evaluation.stats.sign_flip_p`; Fisher 1935, Pitman 1937) decides at one-sided
level 1 - ``confidence`` (5%): *reproduced* when p on the claimed side is at most 5%,
*opposite* when p on the other side is, else *inconclusive*. The test is exact for any number
of seeds, but its smallest p is 2^-n: 0.125 with 3 seeds, so with fewer than 5 seeds no
outcome reaches 5% and the verdict says "inconclusive: 3 seeds cannot support 95%" whatever
the seeds show. (A 95% percentile bootstrap of 3 per-seed differences, used before, is exactly
their [min, max]: each seed alone fills a resample 1 time in 27, more than a 2.5% tail, so
"the interval lies above 0" meant "all 3 seeds above 0", 1 time in 8 when nothing differs.)
The table (``RESULTS.md``) and the figures are written from the records alone
(:func:`results_table`); its History section keeps results that later runs superseded
(:func:`superseded`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from rlvr.errors import RlvrError

if TYPE_CHECKING:
    from rlvr.config import Config

RECORDS = "results"
"""The folder of a claim's run records (``results/<arm>/seed<s>.json``), kept in git."""


class ReproError(RlvrError, ValueError):
    """A claim folder that cannot be run as written."""


@dataclass
class Arm:
    """One arm of a claim: a config to train (``config``; with ``after``, from the policy that
    arm ``after``'s run of the same seed trained: ``model.name`` is that run's exported
    model, ``POLICY`` in its run directory), or a model evaluated like another arm's runs
    (``model`` and ``like``)."""

    name: str
    config: Path | None = None
    model: str | None = None
    like: str | None = None
    after: str | None = None
    overrides: list[str] = field(default_factory=list)


POLICY = "policy"
"""The exported trained policy in the run directory of an arm that another arm starts from."""


@dataclass(frozen=True)
class Test:
    """One measured part of a claim: the metric, the arms compared (a, b), and the side of
    ``margin`` the claim puts a - b on (``greater``: a - b > margin; ``less``: a - b < margin;
    a negative margin with ``greater`` is a non-inferiority claim: "matches"). ``last``: a
    metrics.jsonl key is averaged over its last ``last`` logged values."""

    metric: str
    direction: str
    compare: tuple[str, str]
    margin: float = 0.0
    last: int = 1


@dataclass
class Claim:
    """A claim folder's ``claim.yaml`` (see the module docstring)."""

    name: str
    folder: Path
    title: str
    paper: str
    claim: str
    seeds: list[int]
    arms: dict[str, Arm]
    tests: list[Test]
    compare: tuple[str, str]
    rule: str
    minutes_per_run: float
    eval: dict[str, Any] | None = None
    figure: str | None = None

    def run_dir(self, root: Path, arm: str, seed: int) -> Path:
        """Where the run trains and evaluates (checkpoints, logs): not kept in git."""
        return Path(root) / self.name / arm / f"seed{seed}"

    def record(self, arm: str, seed: int) -> Path:
        """The finished run's record, kept in git beside ``claim.yaml``."""
        return self.folder / RECORDS / arm / f"seed{seed}.json"

    def finished(self, arm: str, seed: int) -> dict[str, Any] | None:
        """The run's record, or None while it has not finished."""
        path = self.record(arm, seed)
        return json.loads(path.read_text()) if path.is_file() else None


def load_claim(folder: Path) -> Claim:
    """Read and check ``folder/claim.yaml``."""
    path = Path(folder) / "claim.yaml"
    if not path.is_file():
        raise ReproError(f"{folder} has no claim.yaml")
    data = yaml.safe_load(path.read_text()) or {}
    needed = ("title", "paper", "claim", "seeds", "arms", "tests", "compare", "rule")
    missing = [key for key in needed if key not in data]
    if missing:
        raise ReproError(f"{path}: missing {', '.join(missing)}")
    arms: dict[str, Arm] = {}
    for name, spec in data["arms"].items():
        arm = Arm(name, overrides=list(spec.get("set", [])))
        if "config" in spec:
            arm.after = spec.get("after")
            arm.config = Path(folder) / spec["config"]
            if not arm.config.is_file():
                raise ReproError(f"{path}: arm {name}'s config {arm.config} does not exist")
        elif "model" in spec and "like" in spec:
            arm.model, arm.like = str(spec["model"]), str(spec["like"])
        else:
            raise ReproError(f"{path}: arm {name} needs config: FILE, or model: and like: ARM")
        arms[name] = arm
    for arm in arms.values():
        if arm.like is not None and (arm.like not in arms or arms[arm.like].config is None):
            raise ReproError(
                f"{path}: arm {arm.name} is evaluated like {arm.like!r}, a trained arm"
            )
        after = arms.get(arm.after) if arm.after is not None else None
        if arm.after is not None and (
            after is None or after.config is None or after.after is not None
        ):
            raise ReproError(
                f"{path}: arm {arm.name} trains after {arm.after!r}, which must be a trained "
                "arm that starts from its config's model"
            )
    pair = tuple(data["compare"])  # the tests' arms unless a test names its own
    if len(pair) != 2 or any(a not in arms for a in pair):
        raise ReproError(f"{path}: compare must name two arms of {sorted(arms)}, got {list(pair)}")
    tests = [
        Test(
            str(t["metric"]),
            str(t.get("direction", "greater")),
            tuple(t.get("compare", pair)),  # type: ignore[arg-type]
            float(t.get("margin", 0.0)),
            int(t.get("last", 1)),
        )
        for t in data["tests"]
    ]
    for test in tests:
        if test.direction not in ("greater", "less") or len(test.compare) != 2:
            raise ReproError(f"{path}: a test needs direction greater or less and two arms")
        if any(arm not in arms for arm in test.compare) or test.last < 1:
            raise ReproError(f"{path}: test {test.metric} compares {list(test.compare)}: not arms")
    if any(arm.model is not None for arm in arms.values()) and not data.get("eval"):
        raise ReproError(f"{path}: an untrained arm is compared by its evaluation: give eval:")
    return Claim(
        name=Path(folder).name,
        folder=Path(folder),
        title=str(data["title"]),
        paper=str(data["paper"]),
        claim=str(data["claim"]),
        seeds=[int(s) for s in data["seeds"]],
        arms=arms,
        tests=tests,
        compare=(pair[0], pair[1]),
        rule=str(data["rule"]),
        minutes_per_run=float(data.get("minutes_per_run", 5)),
        eval=data.get("eval"),
        figure=data.get("figure"),
    )


def find_claims(directory: Path, name: str = "all") -> list[Claim]:
    """The claims of ``directory`` (each sub-folder with a claim.yaml), or the one named."""
    folders = sorted(p.parent for p in Path(directory).glob("*/claim.yaml"))
    if name != "all":
        folders = [f for f in folders if f.name == name]
        if not folders:
            known = ", ".join(sorted(p.parent.name for p in Path(directory).glob("*/claim.yaml")))
            raise ReproError(f"no claim {name!r} in {directory} (claims: {known or 'none'})")
    return [load_claim(f) for f in folders]


def pending_runs(claim: Claim) -> list[tuple[str, int]]:
    """The (arm, seed) runs of ``claim`` not finished yet, trained arms first (those that
    start from another arm's policy after it)."""
    order = sorted(claim.arms.values(), key=lambda arm: (arm.config is None, arm.after is not None))
    return [
        (arm.name, seed)
        for arm in order
        for seed in claim.seeds
        if not claim.record(arm.name, seed).is_file()
    ]


def estimate_minutes(claims: list[Claim]) -> float:
    """The estimated minutes of the runs still to do: a run of an arm with finished runs costs
    their mean wall time (measured), any other the claim's ``minutes_per_run``."""
    total = 0.0
    for claim in claims:
        for arm, _ in pending_runs(claim):
            done = [r["seconds"] / 60 for s in claim.seeds if (r := claim.finished(arm, s))]
            total += sum(done) / len(done) if done else claim.minutes_per_run
    return total


def more_seeds_minutes(claim: Claim, extra: int) -> float:
    """The estimated minutes of ``extra`` more seeds of every arm of ``claim`` (seeds after its
    largest), costed as :func:`estimate_minutes` does."""
    last = max(claim.seeds)
    more = dataclasses.replace(claim, seeds=[*claim.seeds, *range(last + 1, last + 1 + extra)])
    return estimate_minutes([more]) - estimate_minutes([claim])


_LOGGED = (
    "eval/",
    "policy/",
    "reward/",
    "response/",
    "sampling/",
    "groups/",
    "tokens/",
    "tree/",
)
"""Prefixes of the metrics.jsonl keys a test reads from the run's log (the others, e.g.
``accuracy`` or ``pass@16``, from its evaluation's summary)."""


def _metric(claim: Claim, test: Test, run_dir: Path, summary: dict[str, Any] | None) -> float:
    """A test's value for one run: from the evaluation's summary, or (a key of :data:`_LOGGED`
    or no evaluation) the mean of the last ``test.last`` values in its metrics.jsonl."""
    metric = test.metric
    if summary is not None and not metric.startswith(_LOGGED):
        metrics = summary["metrics"]
        if metric not in metrics:
            raise ReproError(
                f"claim {claim.name}: metric {metric!r} is not in the evaluation's summary "
                f"(it has {', '.join(sorted(metrics))})"
            )
        return float(metrics[metric])
    from rlvr.logging import read_metrics

    values = [r[metric] for r in read_metrics(run_dir) if metric in r]
    if not values:
        raise ReproError(f"claim {claim.name}: {run_dir}'s metrics.jsonl never logged {metric}")
    tail = values[-test.last :]
    return float(sum(tail) / len(tail))


def run_one(
    claim: Claim, arm_name: str, seed: int, root: Path, keep_checkpoints: bool = False
) -> dict[str, Any]:
    """Train (or resume) and evaluate one run; write and return its record. Once the record is
    written the run's ``checkpoints/`` (weights and AdamW state, ~1.6 GB for SmolLM2: only a
    resume or a later evaluation needs them) is removed unless ``keep_checkpoints``; its
    config, metrics, samples and evaluation stay."""
    from rlvr.config import load_config, save_config
    from rlvr.rollout.torch_engine import describe_device

    arm = claim.arms[arm_name]
    run_dir = claim.run_dir(root, arm_name, seed)
    start = time.perf_counter()
    summary = None
    if arm.config is not None:
        from rlvr.trainer import train

        sets = [*arm.overrides, f"train.seed={seed}", f"logging.run_dir={run_dir}"]
        if arm.after is not None:  # from the policy arm `after` trained with this seed
            policy = claim.run_dir(root, arm.after, seed) / POLICY
            if claim.finished(arm.after, seed) is None or not policy.is_dir():
                raise ReproError(
                    f"arm {arm_name} trains after {arm.after}'s seed {seed}, whose trained "
                    f"policy {policy} is not there: run that arm first (its record removed)"
                )
            sets.append(f"model.name={policy}")
        cfg = load_config(arm.config, sets)
        resume = run_dir if (run_dir / "config.yaml").is_file() else None
        if resume is not None:
            cfg = load_config(run_dir / "config.yaml", sets)
        started = _run_start(run_dir, resume is not None)
        started["config_sha256"] = config_sha256(cfg)
        train(cfg, resume=resume)
        if claim.eval:
            summary = _evaluate(claim, str(run_dir), run_dir / "eval-repro", seed, like=None)
    else:
        assert arm.like is not None and arm.model is not None
        trained = claim.arms[arm.like]
        if claim.finished(arm.like, seed) is None:
            raise ReproError(f"arm {arm_name} is evaluated like {arm.like}'s seed {seed}: not run")
        started = _start_now()  # an evaluation is made again in whole, never resumed
        like = claim.run_dir(root, arm.like, seed)
        if not (like / "config.yaml").is_file():  # its run directory is gone: the same config
            assert trained.config is not None
            like = run_dir / "like.yaml"
            run_dir.mkdir(parents=True, exist_ok=True)
            sets = [*trained.overrides, f"train.seed={seed}"]
            save_config(load_config(trained.config, sets), like)
        started["config_sha256"] = config_sha256(
            load_config(like / "config.yaml" if like.is_dir() else like)
        )
        summary = _evaluate(claim, arm.model, run_dir, seed, like=like)
    record: dict[str, Any] = {
        "claim": claim.name,
        "arm": arm_name,
        "seed": seed,
        "values": {t.metric: _metric(claim, t, run_dir, summary) for t in claim.tests},
        "seconds": time.perf_counter() - start,
        "run_dir": str(run_dir),
        "machine": describe_device("cpu"),
        **started,
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if summary is not None:
        record["eval"] = summary["metrics"]
    if (run_dir / "precision.json").is_file():  # what `auto` chose on this machine
        chosen = json.loads((run_dir / "precision.json").read_text())
        record["precision"] = {k: chosen[k] for k in ("rollout.dtype", "train.autocast")}
    if claim.figure is not None and arm.config is not None:
        from rlvr.logging import read_metrics

        record["curve"] = [
            [r["step"], r[claim.figure]] for r in read_metrics(run_dir) if claim.figure in r
        ]
    if any(other.after == arm_name for other in claim.arms.values()):
        from rlvr.export import export  # another arm trains from this run's policy

        export(run_dir, run_dir / POLICY, merge=True, overwrite=True)
    path = claim.record(arm_name, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    if not keep_checkpoints:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    return record


def config_sha256(cfg: Config) -> str:
    """SHA-256 of a resolved :class:`rlvr.config.Config` as canonical JSON (sorted keys), with
    ``logging.run_dir`` left out: where a run went is not what it ran. Two records with equal
    hashes ran the same settings (defaults included, so a code change that adds a setting
    changes it); an untrained arm's is the config it was evaluated like."""
    data = cfg.model_dump(mode="json")
    data["logging"] = {**data["logging"], "run_dir": None}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


START_FILE = "repro_start.json"
"""In a run directory: the commit and time read at the run's first start (:func:`_run_start`)."""


def _run_start(run_dir: Path, resuming: bool) -> dict[str, Any]:
    """What ran, read at the run's start: ``commit_start`` (:func:`_commit`) and ``started``
    (UTC). A new run writes them into ``run_dir`` (:data:`START_FILE`); a resumed one reads
    them from there, so its record names the commit and time it started at, not the
    resume's."""
    path = run_dir / START_FILE
    if resuming and path.is_file():
        return json.loads(path.read_text())
    started = _start_now()
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(started) + "\n")
    return started


def _start_now() -> dict[str, Any]:
    """``commit_start`` (:func:`_commit`) and ``started`` (UTC, to the minute), read now."""
    return {
        "commit_start": _commit(),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _commit() -> str | None:
    """The git commit rlvr runs from (with ``+`` when the work tree has changes), or None."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def _evaluate(claim: Claim, model: str, out: Path, seed: int, like: Path | None) -> dict[str, Any]:
    from rlvr.evaluation.api import evaluate

    spec = dict(claim.eval or {})
    return evaluate(
        model,
        n=int(spec.get("n", 1)),
        k=spec.get("k"),
        sampling_seed=1234 + seed,
        out=out,
        like=like,
        overrides=list(spec.get("set", [])),
        progress=False,
    )


def run_claims(
    claims: list[Claim],
    root: Path,
    say: Callable[[str], None] = print,
    keep_checkpoints: bool = False,
) -> list[str]:
    """Run every pending run of ``claims`` (finished ones are skipped), one at a time. A run
    that fails is reported and the others go on (hours of runs are not lost to one); returns
    the failures, one line each (``claim: arm A, seed S: message``)."""
    failures = []
    for claim in claims:
        todo = pending_runs(claim)
        total = len(claim.arms) * len(claim.seeds)
        say(f"{claim.name}: {total - len(todo)} of {total} runs finished, {len(todo)} to run")
        for arm, seed in todo:
            say(f"{claim.name}: arm {arm}, seed {seed}")
            try:
                record = run_one(claim, arm, seed, root, keep_checkpoints)
            except Exception as err:  # noqa: BLE001 - reported, and the next run goes on
                failures.append(f"{claim.name}: arm {arm}, seed {seed}: {err}")
                say(f"{failures[-1]} (failed; its run directory is kept, a rerun resumes it)")
                continue
            shown = ", ".join(f"{k} = {v:.4g}" for k, v in record["values"].items())
            say(f"{claim.name}: arm {arm}, seed {seed}: {shown}")
    return failures


def verdict(claim: Claim, confidence: float = 0.95) -> dict[str, Any]:
    """The claim's result from its records alone: each arm's values by metric and seed, and per
    test the paired difference's mean, the exact sign-flip p-values on the claimed side and on
    the other (:func:`rlvr.evaluation.stats.sign_flip_p`), the smallest p the seeds allow
    (``2^-n``) and the verdict at one-sided level ``1 - confidence`` (see the module
    docstring); the wall time and the records.

    A test row: ``{"metric", "direction", "compare", "margin", "verdict"}``, and once every
    seed has both arms ``"mean"`` (of a - b), ``"p"`` (claimed side), ``"p_opposite"``,
    ``"p_min"`` and ``"on_side"`` (the seeds on the claimed side of the margin).
    """
    from rlvr.evaluation.stats import seeds_needed, sign_flip_p

    alpha, needed = 1 - confidence, seeds_needed(confidence, two_sided=False)
    level = f"{100 * confidence:g}%"
    values: dict[str, dict[str, dict[int, float]]] = {t.metric: {} for t in claim.tests}
    seconds, records = 0.0, []
    for arm in claim.arms:
        for metric in values:
            values[metric][arm] = {}
        for seed in claim.seeds:
            record = claim.finished(arm, seed)
            if record is None:
                continue
            for metric in values:
                values[metric][arm][seed] = float(record["values"][metric])
            seconds += float(record["seconds"])
            records.append(claim.record(arm, seed))
    result: dict[str, Any] = {"values": values, "seconds": seconds, "records": records, "tests": []}
    for test in claim.tests:
        a, b = test.compare
        v = values[test.metric]
        seeds = [s for s in claim.seeds if s in v[a] and s in v[b]]
        row: dict[str, Any] = {
            "metric": test.metric,
            "direction": test.direction,
            "compare": [a, b],
            "margin": test.margin,
        }
        if len(seeds) < len(claim.seeds):
            row["verdict"] = f"pending ({len(seeds)} of {len(claim.seeds)} seeds)"
            result["tests"].append(row)
            continue
        diffs = np.array([v[a][s] - v[b][s] for s in seeds])
        sign = 1.0 if test.direction == "greater" else -1.0
        claimed = sign * (diffs - test.margin)  # > 0: on the claimed side of the margin
        n = len(seeds)
        row.update(
            mean=float(diffs.mean()),
            p=sign_flip_p(claimed, "greater"),
            p_opposite=sign_flip_p(claimed, "less"),
            p_min=0.5**n,
            on_side=int((claimed > 0).sum()),
        )
        if n < needed:
            row["verdict"] = (
                f"inconclusive: {n} seeds cannot support {level} (smallest p "
                f"{row['p_min']:.3g}; {row['on_side']} of {n} on the claimed side)"
            )
        elif row["p"] <= alpha + 1e-12:
            row["verdict"] = "reproduced"
        elif row["p_opposite"] <= alpha + 1e-12:
            row["verdict"] = "opposite"
        else:
            row["verdict"] = "inconclusive"
        result["tests"].append(row)
    return result


def claim_figure(claim: Claim, out: Path) -> bool:
    """Draw ``claim.figure`` (a metrics.jsonl key) per step for each trained arm from the
    records' curves: every finished seed thin, their mean thick; write the PNG to ``out``.
    False (and ``out`` removed) when no finished run logged it."""
    if claim.figure is None:
        return False
    from matplotlib.figure import Figure

    from rlvr.evaluation.plots import png_bytes

    fig = Figure(figsize=(6, 3.6), layout="constrained")
    ax = fig.add_subplot()
    drawn = False
    for i, arm in enumerate(a for a in claim.arms.values() if a.config is not None):
        curves = []
        for seed in claim.seeds:
            record = claim.finished(arm.name, seed)
            if record is None or not record.get("curve"):
                continue
            steps = [step for step, _ in record["curve"]]
            values = [value for _, value in record["curve"]]
            ax.plot(steps, values, color=f"C{i}", alpha=0.3, linewidth=0.8)
            curves.append(dict(zip(steps, values, strict=True)))
        if curves:
            common = sorted(set.intersection(*(set(c) for c in curves)))
            mean = [sum(c[s] for c in curves) / len(curves) for s in common]
            ax.plot(common, mean, color=f"C{i}", linewidth=2, label=f"{arm.name} ({len(curves)})")
            drawn = True
    if not drawn:
        out.unlink(missing_ok=True)  # no record draws it any more: no stale figure
        return False
    ax.set_xlabel("step")
    ax.set_ylabel(claim.figure)
    ax.set_title(claim.title, fontsize=9)
    ax.legend(fontsize=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(png_bytes(fig))
    return True


def _machines(claim: Claim) -> str:
    """Where the claim's finished runs ran, and how many on each: the CPU (and the precision
    ``auto`` chose there), so a claim whose arms ran on different machines shows it."""
    counts: dict[str, int] = {}
    for arm in claim.arms:
        for seed in claim.seeds:
            record = claim.finished(arm, seed)
            if record is not None:
                where = record["machine"]
                if "precision" in record:
                    where += ", " + " / ".join(f"{k} {v}" for k, v in record["precision"].items())
                counts[where] = counts.get(where, 0) + 1
    return "; ".join(f"{where} ({n} run{'s' * (n != 1)})" for where, n in counts.items())


def _commits(claim: Claim) -> str:
    """The commits the claim's finished runs ran at, each with its runs (``arm seeds``), and
    whether they were read at each run's start (``commit_start``) or, in older records, after
    it; "" before any run."""
    by_commit: dict[str, dict[str, list[int]]] = {}
    late = 0
    for arm in claim.arms:
        for seed in claim.seeds:
            record = claim.finished(arm, seed)
            if record is not None:
                commit = record.get("commit_start") or record.get("commit") or "unknown"
                late += "commit_start" not in record
                by_commit.setdefault(commit, {}).setdefault(arm, []).append(seed)
    if not by_commit:
        return ""
    runs = {
        commit: "; ".join(f"{arm} {', '.join(map(str, seeds))}" for arm, seeds in arms.items())
        for commit, arms in by_commit.items()
    }
    text = ", ".join(f"{commit} ({which})" for commit, which in runs.items())
    notes = [f"the runs span {len(by_commit)} commits"] if len(by_commit) > 1 else []
    if late:
        notes.append(f"{late} record(s) older than `commit_start`: commit read after the run")
    return "; ".join([text, *notes])


def _seeds_line(claim: Claim, confidence: float) -> str:
    """How far the claim's seeds go: the smallest p they allow and, when it cannot reach
    ``1 - confidence``, the seeds needed and the estimated minutes of the missing ones."""
    from rlvr.evaluation.stats import seeds_needed

    n, needed = len(claim.seeds), seeds_needed(confidence, two_sided=False)
    line = f"Seeds: {n} (the smallest one-sided p of {n} seeds is 2^-{n} = {0.5**n:.3g})"
    if n >= needed:
        return line + "."
    minutes = more_seeds_minutes(claim, needed - n)
    return (
        f"{line}: {100 * confidence:g}% needs {needed}; {needed - n} more per arm would take "
        f"about {minutes:.0f} min on this machine (each arm's mean measured wall time)."
    )


HISTORY = "## History"
_HISTORY_INTRO = (
    "Results that were published here and later superseded, newest first, as they were "
    "published (git's history of this file and of `<claim>/results/` holds them too). "
    "`rlvr repro` adds an entry when a rewritten table changes or drops a per-seed value it "
    "had published, and keeps the entries below as they are."
)


def _published(text: str) -> dict[tuple[str, str, str], dict[str, str]]:
    """The rows of a RESULTS.md's results table by (claim title, metric, a - b claimed), each
    as its cells by column header; {} without a table."""
    rows: dict[tuple[str, str, str], dict[str, str]] = {}
    header: list[str] | None = None
    title = ""
    for line in text.splitlines():
        if not line.startswith("|"):
            if header is not None:
                break  # the table ended
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells if cells[0] == "claim" else None
        elif not set(line) <= set("|-: "):
            row = dict(zip(header, cells, strict=False))
            title = row.get("claim") or title
            rows[(title, row.get("metric", ""), row.get("a - b claimed", ""))] = row
    return rows


def _changed(published: str, now: str | None) -> bool:
    """Whether a published per-seed list (``0.5, 0.6, -``) lost a value: a number that is now
    another or gone (a pending ``-`` filled in, or seeds added, is no change)."""
    before = [v.strip() for v in published.split(",")]
    after = [v.strip() for v in now.split(",")] if now is not None else []
    return any(v != "-" and (i >= len(after) or after[i] != v) for i, v in enumerate(before))


def superseded(previous: str, current: str, today: str) -> list[str]:
    """History entries (markdown list items) for the rows of the ``previous`` RESULTS.md table
    whose published per-seed values the ``current`` table changes or drops: the row as it was,
    dated ``today``. Rows that published no value (pending) supersede nothing."""
    old, new = _published(previous), _published(current)
    entries = []
    for key, row in old.items():
        now = new.get(key, {})
        seeds = ("a by seed", "b by seed")
        if not any(_changed(row.get(c, "-"), now.get(c)) for c in seeds):
            continue
        title, metric, claimed = key
        shown = [
            f"{h}: {v}"
            for h, v in row.items()
            if v and v != "-" and h not in ("claim", "paper", "metric", "a - b claimed")
        ]
        entries.append(f"- {today}, superseded: {title}, {metric} {claimed}; {'; '.join(shown)}")
    return entries


def _history(previous: str, entries: list[str]) -> list[str]:
    """RESULTS.md's History section: ``entries`` first, then the previous file's entries (its
    section from its first list item on, kept verbatim); [] while there is none."""
    section = previous.split(f"\n{HISTORY}\n", 1)[1] if f"\n{HISTORY}\n" in previous else ""
    lines = section.strip().splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("- ")), len(lines))
    kept = lines[first:]
    if not entries and not kept:
        return []
    return ["", HISTORY, "", _HISTORY_INTRO, "", *entries, *kept]


def results_table(
    claims: list[Claim],
    directory: Path,
    previous: str = "",
    today: str = "",
    confidence: float = 0.95,
) -> str:
    """``RESULTS.md`` of the claims folder ``directory``: one row per claim and test, then each
    claim's rule, seeds, machines, commits and records (paths relative to ``directory``), then
    the History section: the ``previous`` RESULTS.md's, with an entry dated ``today`` for each
    published result the new table supersedes (:func:`superseded`)."""
    from rlvr.evaluation.stats import seeds_needed

    level, needed = f"{100 * confidence:g}%", seeds_needed(confidence, two_sided=False)
    alpha = f"{1 - confidence:.2g}"
    intro = (
        "Written by `rlvr repro` from the runs' records alone (`<claim>/results/<arm>/seed<s>.json`, "
        "each naming its run directory, machine and commit, and records written since issue 45 "
        "the commit at the run's start and its config's hash); every number below is "
        "one of theirs. A test's verdict is the exact sign-flip permutation test (Fisher 1935; "
        "Pitman 1937) of the paired differences a - b, seed by seed, against the claimed side of "
        f"the margin, one-sided at level {alpha}: reproduced when p on the claimed side is at "
        f"most {alpha}, opposite when p on the other side is, else inconclusive. With n seeds the "
        "smallest p is 2^-n (all n seeds on one side): 0.125 with 3 seeds, 0.031 with 5, so "
        f"with fewer than {needed} seeds a test is 'inconclusive: n seeds cannot support "
        f"{level}' whatever its seeds show. The claims' rules, written before their runs, name a "
        "95% bootstrap interval of the mean difference; with 3 seeds that interval is exactly "
        "[min, max] of the 3 differences (each seed alone fills a resample 1 time in 27, more "
        "than a 2.5% tail), which lies on one side of 0 1 time in 8 when nothing differs: not a "
        "95% interval. The exact test, whose level is true for any number of seeds, decides instead."
    )
    lines = [
        "# What the papers claim, and what rlvr reproduces",
        "",
        *textwrap.wrap(intro, width=96, break_on_hyphens=False),
        "",
        "| claim | paper | metric | a - b claimed | a by seed | b by seed | mean a - b "
        "| p, claimed side / other side | verdict | wall time |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    details = []
    for claim in claims:
        r = verdict(claim, confidence)
        for i, test in enumerate(r["tests"]):
            a, b = test["compare"]
            got = r["values"][test["metric"]]
            by_seed = [
                ", ".join(f"{got[arm][s]:.3f}" if s in got[arm] else "-" for s in claim.seeds)
                for arm in (a, b)
            ]
            mean, p = "-", "-"
            if "mean" in test:
                mean, p = f"{test['mean']:+.3f}", f"{test['p']:.3g} / {test['p_opposite']:.3g}"
            sign = f"{'>' if test['direction'] == 'greater' else '<'} {test['margin']:g}"
            title, paper = (claim.title, claim.paper) if i == 0 else ("", "")
            wall = f"{r['seconds'] / 60:.1f} min" if i == 0 else ""
            lines.append(
                f"| {title} | {paper} | {test['metric']} | {a} - {b} {sign} | {by_seed[0]} "
                f"| {by_seed[1]} | {mean} | {p} | {test['verdict']} | {wall} |"
            )
        details += [
            "",
            f"## {claim.title} (`repro/{claim.name}`)",
            "",
            f"Claim: {claim.claim}",
            "",
            f"Decision rule (committed before the runs): {claim.rule}",
            "",
            _seeds_line(claim, confidence),
            "",
            "Machines: " + (_machines(claim) or "none yet"),
            "",
            "Commits: " + (_commits(claim) or "none yet"),
            "",
            "Records: "
            + (
                ", ".join(
                    f"[{p.relative_to(directory)}]({p.relative_to(directory)})"
                    for p in r["records"]
                )
                or "none yet"
            ),
        ]
        if claim.figure is not None and claim_figure(claim, claim.folder / "figure.png"):
            details += ["", f"![{claim.figure} by step]({claim.name}/figure.png)"]
    table = "\n".join(lines + details) + "\n"
    history = _history(previous, superseded(previous, table, today))
    return table + ("\n".join(history) + "\n" if history else "")
