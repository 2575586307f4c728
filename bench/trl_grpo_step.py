"""TRL's GRPOTrainer on the bench workload; runs inside the separate TRL environment.

Not part of rlvr: `bench/grpo_step.py` calls it with the TRL venv's python. Reads a JSON job
(model dir, prompts, answers, settings), trains ``steps`` optimiser steps and prints one JSON
line with the wall time of each step. The reward is rlvr's numeric verifier, loaded from its
file so that both sides score identically.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer


def main() -> None:
    job = json.loads(open(sys.argv[1]).read())
    spec = importlib.util.spec_from_file_location("verifiers", job["verifier_file"])
    verifiers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(verifiers)

    def reward(completions, answer, **kwargs):
        if job.get("alternating"):  # a random-weight model: 0, 1, 0, 1 (see grpo_step.py)
            return [float(i % 2) for i in range(len(completions))]
        return [
            verifiers.numeric_reward(c[0]["content"], a)
            for c, a in zip(completions, answer, strict=True)
        ]

    rows = [
        {"prompt": [{"role": "user", "content": p}], "answer": a}
        for p, a in zip(job["prompts"], job["answers"], strict=True)
    ]
    dataset = Dataset.from_list(rows * job["steps"])
    n, g = len(job["prompts"]), job["group_size"]
    config = GRPOConfig(
        output_dir=job["output_dir"],
        per_device_train_batch_size=job["micro_batch_size"],
        gradient_accumulation_steps=n * g // job["micro_batch_size"],
        num_generations=g,
        max_completion_length=job["max_new_tokens"],
        temperature=job["temperature"],
        beta=0.0,
        learning_rate=job["lr"],
        max_steps=job["steps"],
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=job.get("device", "cpu") == "cpu",
        bf16=job["dtype"] == "bf16",
        shuffle_dataset=False,
        seed=0,
    )
    model = AutoModelForCausalLM.from_pretrained(job["model_dir"], dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(job["model_dir"])
    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter() - self.t0)

    trainer = GRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        callbacks=[Timer()],
    )
    trainer.train()
    print(json.dumps({"step_seconds": times, "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
