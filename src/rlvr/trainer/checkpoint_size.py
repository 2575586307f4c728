"""What a checkpoint of a learner stores, counted before the run (the start-up disk check,
:func:`rlvr.run_checks.check_run_start`): the policy's weights, the modules checkpointed beside
it and the parameters AdamW trains; for Ray's learners, which live in other processes, built on
the meta device from the run's config."""

from __future__ import annotations

from typing import Any


def learner_bytes(learner: Any, cfg: Any) -> tuple[int, int, int]:
    """(bytes of the weights a checkpoint stores, bytes of the parameters AdamW trains, how many
    tensors it stores) of a learner: counted on its policy and the modules it checkpoints beside
    it (``modules()``: a value head, a reference that is updated, a semi-online snapshot) in
    this process; or for Ray's learners (none here) on the meta device, the policy from the
    model's config (fp32, as the learners hold it) and those modules from the run's config
    ``cfg`` and preset (:func:`_modules_by_config`)."""
    import torch

    policy = getattr(learner, "policy", None)
    if policy is None:
        from transformers import AutoConfig, AutoModelForCausalLM

        from rlvr.models import resolve

        with torch.device("meta"):
            config = AutoConfig.from_pretrained(resolve(cfg.model.name))
            policy = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            extra, trained_extra = _modules_by_config(cfg, learner, policy)
        trained = {id(p): p for p in policy.parameters() if p.requires_grad}
        trained |= {id(p): p for m in trained_extra for p in m.parameters()}
    else:
        extra = list(learner.modules().values())
        trained = {id(p): p for g in learner.optimizer.param_groups for p in g["params"]}
    weights = {id(p): p for p in policy.parameters()}  # tied weights once
    stored = [t for m in extra for t in _stored_tensors(m)]

    def size(tensors: Any) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    return (
        size(weights.values()) + size(stored),
        size(trained.values()),
        len(weights) + len(stored),
    )


def _stored_tensors(module: Any) -> list[Any]:
    """The tensors a checkpoint stores of ``module`` (safetensors): its parameters, tied ones
    once, and its persistent buffers."""
    kept = module.state_dict().keys()
    return [*module.parameters(), *(b for n, b in module.named_buffers() if n in kept)]


def _modules_by_config(cfg: Any, learner: Any, policy: Any) -> tuple[list[Any], list[Any]]:
    """(the modules a checkpoint stores beside ``policy``, those of them AdamW trains) as
    :meth:`rlvr.trainer.learner.Learner.modules` holds them, built from ``cfg`` and the preset
    (``learner.algo``) as :func:`rlvr.trainer.build.build_learner` builds them (on the device
    current when called): PPO's value head (trained), a full reference copy in the rollout dtype
    when it is reset or mixed (``reference.reset_every``), the semi-online snapshot
    (``objective.sync_every`` > 1), the entropy controller's state. A LoRA policy's adapters are not
    modelled here."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr import algorithms, precision
    from rlvr.policy import ValueHead
    from rlvr.trainer.learner import PublishedCopy

    algo = learner.algo
    stored: list[Any] = []
    trained: list[Any] = []
    if algo.advantage.name == "gae":
        head = ValueHead(policy.config.hidden_size)
        stored.append(head)
        trained.append(head)
    if algorithms.needs_reference(algo) and algo.reference.reset_every and cfg.model.lora is None:
        chosen = getattr(learner, "precision", None) or {}  # what ``auto`` stood for there
        name = chosen.get("rollout.dtype", cfg.rollout.dtype)
        dtype = precision.DTYPES.get(name, torch.float32)  # unresolved auto: fp32, the most
        stored.append(AutoModelForCausalLM.from_config(policy.config, dtype=dtype))
    if algo.objective.sync_every > 1:
        stored.append(PublishedCopy(policy))
    entropy = algo.entropy
    if entropy.target is not None:
        stored.append(
            algorithms.EntropyController(entropy.target, entropy.coef_step, entropy.coef_max)
        )
    return stored, trained
