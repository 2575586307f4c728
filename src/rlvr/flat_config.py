"""The flat ``algorithm:`` keys of older configs (``algorithm.beta``, ``algorithm.params.X``,
``dynamic_sampling``, ``group_filter``, ``rollout.hints``, ``rollout.replay``, ...), read into
the nested form with one note line naming each key and its new place: :data:`FLAT_KEYS` maps
each to its place, :func:`nest_algorithm` reads a whole config, :func:`apply_flat` one key
(a ``--set``) onto the nested section."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

FLAT_KEYS: dict[str, str] = {
    "advantage": "advantage.name",
    "normalize": "advantage.normalize",
    "pos_weight": "advantage.pos_weight",
    "neg_weight": "advantage.neg_weight",
    "reward_baseline": "advantage.baseline",
    "gamma": "advantage.gamma",
    "lam": "advantage.lam",
    "policy_loss": "policy_loss.name",
    "clip_low": "policy_loss.clip_low",
    "clip_high": "policy_loss.clip_high",
    "dual_clip": "policy_loss.dual_clip",
    "aggregation": "aggregation.name",
    "beta": "kl.beta",
    "kl_estimator": "kl.estimator",
    "kl_in": "kl.placement",
    "reference_reset_every": "reference.reset_every",
    "reference_mix": "reference.mix",
    "entropy_coef": "entropy.coef",
    "top_entropy_rho": "entropy.top_rho",
    "entropy_target": "entropy.target",
    "entropy_coef_step": "entropy.coef_step",
    "entropy_coef_max": "entropy.coef_max",
    "vf_coef": "value.coef",
    "value_clip": "value.clip",
    "tis_cap": "correction.tis_cap",
    "tis_level": "correction.tis_level",
    "mis_band": "correction.mis_band",
    "mis_level": "correction.mis_level",
    "off_policy_mask": "correction.off_policy_mask",
    "credit": "credit.name",
    "credit_gamma": "credit.gamma",
    "gigpo_weight": "credit.gigpo_weight",
    "credit_gate": "credit.gate",
    "group_selector": "select.name",
    "max_draws": "select.max_draws",
    "overlong_buffer_frac": "overlong.buffer_frac",
    "objective": "objective.name",
    "samples": "objective.samples",
    "pairing": "objective.pairing",
    "sync_every": "objective.sync_every",
    "sft_coef": "objective.sft_coef",
}
"""Each key of the flat ``algorithm:`` form older configs used -> its nested place. Besides
these: ``dynamic_sampling: true`` is ``select.name: informative``; ``group_filter`` and
``group_filter_oversample`` are the stage ``{name: group_filter, criterion, oversample}``;
``params.PART`` are that part's keyword arguments (``params.kl_estimator``: ``kl``,
``params.group_selector``: ``select``, ``params.group_filter``: the group_filter stage)."""

FLAT_PARAMS = {
    "advantage": "advantage",
    "policy_loss": "policy_loss",
    "aggregation": "aggregation",
    "kl_estimator": "kl",
    "group_selector": "select",
    "objective": "objective",
}
"""``params.X`` of the flat form -> the part whose keyword arguments they are."""


ROLLOUT_STAGES = {
    "hints": ("hints", "fractions"),
    "hint_threshold": ("hints", "threshold"),
    "replay": ("replay", "replayed"),
    "replay_buffer": ("replay", "buffer"),
    "replay_threshold": ("replay", "threshold"),
}
"""The ``rollout:`` keys of the flat form that configured a draw stage -> (stage, setting)."""

_NEUTRAL = {"gamma": 1.0, "lam": 1.0, "reward_baseline": 0.0}
"""Flat keys whose value here changed nothing for an estimator that does not take them (an
older rlvr accepted them with any estimator)."""

_STAGE_ORDER = ("hints", "group_filter", "replay")


def is_flat(section: str, key: str, value: Any) -> bool:
    """Whether ``section.key: value`` is a key of the flat form (a part's name given as a
    string, ``params``, a stage's key, ...) rather than of the nested one."""
    if section == "rollout":
        return key in ROLLOUT_STAGES
    if key in ("dynamic_sampling", "group_filter", "group_filter_oversample"):
        return True
    if key == "params":
        return value is None or isinstance(value, Mapping)
    return key in FLAT_KEYS and not isinstance(value, Mapping)


def _stage(algorithm: dict[str, Any], name: str) -> dict[str, Any]:
    """The entry of the stage ``name`` in ``algorithm["stages"]``, added in its place (hints,
    group_filter, replay) when absent."""
    stages = algorithm.get("stages")
    stages = algorithm["stages"] = list(stages) if isinstance(stages, list) else []
    for i, entry in enumerate(stages):
        if isinstance(entry, Mapping) and entry.get("name") == name:
            stages[i] = dict(entry)
            return stages[i]
    rank = _STAGE_ORDER.index(name)
    at = sum(1 for e in stages if isinstance(e, Mapping) and e.get("name") in _STAGE_ORDER[:rank])
    stages.insert(at, {"name": name})
    return stages[at]


def _drop_stage(algorithm: dict[str, Any], name: str) -> None:
    stages = algorithm.get("stages")
    if isinstance(stages, list):
        algorithm["stages"] = [
            e for e in stages if not (isinstance(e, Mapping) and e.get("name") == name)
        ]


def apply_flat(algorithm: dict[str, Any], key: str, value: Any) -> str | None:
    """Apply one key of the flat form (``algorithm.KEY`` or ``rollout.KEY``) to the nested
    ``algorithm`` mapping in place; the note's "KEY as PLACE", or None when it set nothing."""
    section, _, name = key.partition(".")

    def put(path: str, v: Any) -> str:
        part, field = path.split(".")
        node = algorithm.get(part)
        algorithm[part] = node = dict(node) if isinstance(node, Mapping) else {}
        node[field] = v
        return f"{key} as {path}"

    if section == "rollout":
        stage, setting = ROLLOUT_STAGES[name]
        if setting in ("fractions", "replayed") and not value:
            _drop_stage(algorithm, stage)  # [] or 0: off
            return None
        exists = any(
            isinstance(e, Mapping) and e.get("name") == stage for e in algorithm.get("stages") or ()
        )
        if setting not in ("fractions", "replayed") and not exists:
            return None  # a setting of a stage the config does not run
        _stage(algorithm, stage)[setting] = value
        return f"{key} as stages {stage}"
    if value is None and name in ("dynamic_sampling", "params"):
        return None
    if name == "dynamic_sampling":
        return put("select.name", "informative" if value else "all")
    if name == "group_filter":
        if value is None:
            _drop_stage(algorithm, "group_filter")
            return None
        _stage(algorithm, "group_filter")["criterion"] = value
        return f"{key} as stages group_filter"
    if name == "group_filter_oversample":
        if value is None:
            return None
        _stage(algorithm, "group_filter")["oversample"] = value
        return f"{key} as stages group_filter"
    if name == "params":
        for part, kwargs in value.items():
            if part == "group_filter" and isinstance(kwargs, Mapping):
                _stage(algorithm, "group_filter").update(kwargs)
            elif part in FLAT_PARAMS and isinstance(kwargs, Mapping):
                for arg, v in kwargs.items():
                    put(f"{FLAT_PARAMS[part]}.{arg}", v)
            else:
                algorithm.setdefault("params", {})[part] = kwargs  # for the check to name
        return f"{key} as each part's own keys"
    if value is None:
        return None  # the preset's, as unset
    return put(FLAT_KEYS[name], value)


def _neutral(algorithm: dict[str, Any], flat: dict[str, Any]) -> None:
    """Drop the flat ``gamma: 1``, ``lam: 1``, ``reward_baseline: 0`` that the algorithm's
    estimator does not take (an older rlvr ignored them there)."""
    from rlvr import algorithms

    given = [k for k, v in _NEUTRAL.items() if k in flat and flat[k] == v]
    advantage = algorithm.get("advantage") or {}
    name = advantage.get("name") if isinstance(advantage, Mapping) else None
    preset = algorithms.PRESETS.get(algorithm.get("preset", "grpo"))
    name = name or (preset.advantage.name if preset is not None else None)
    estimator = algorithms.ADVANTAGES.get(name) if isinstance(name, str) else None
    if estimator is None:
        return
    for key in given:
        arg = FLAT_KEYS[key].split(".")[1]
        if arg not in estimator.hyperparams and isinstance(advantage, dict):
            advantage.pop(arg, None)


def nest_algorithm(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``data`` (a whole config) with its ``algorithm:`` section and the stage keys of
    ``rollout:`` read from the flat form older versions used into the nested form, and the
    flat keys read with their new places (empty for a nested config)."""
    out = dict(data)
    algorithm = out.get("algorithm")
    rollout = out.get("rollout")
    read: list[str] = []
    flat: dict[str, Any] = {}
    if isinstance(algorithm, dict):
        flat.update({k: v for k, v in algorithm.items() if is_flat("algorithm", k, v)})
        algorithm = {k: v for k, v in algorithm.items() if k not in flat}
    if isinstance(rollout, dict):
        staged = {k: v for k, v in rollout.items() if is_flat("rollout", k, v)}
        out["rollout"] = {k: v for k, v in rollout.items() if k not in staged}
        flat.update({f"rollout.{k}": v for k, v in staged.items()})
    if not flat:
        return out, read
    if not isinstance(algorithm, dict):
        algorithm = {}
    order = sorted(flat, key=lambda k: k not in ("rollout.hints", "rollout.replay"))
    for key in order:  # rollout.hints and rollout.replay before their settings
        note = apply_flat(
            algorithm, key if key.startswith("rollout.") else f"algorithm.{key}", flat[key]
        )
        if note is not None:
            read.append(note)
    if (
        "group_selector" in flat
        and flat["group_selector"]
        and flat.get("dynamic_sampling") is not None
    ):
        algorithm["select"]["name"] = flat["group_selector"]  # a selector beside the flag wins
    if any(k in flat for k in _NEUTRAL):
        _neutral(algorithm, flat)
    out["algorithm"] = algorithm
    return out, read


_NOTED: set[str] = set()


def deprecation_note(keys: list[str]) -> None:
    """One line on stderr, once per process and set of keys, naming the flat keys read."""
    line = (
        f"note: this config uses the flat algorithm keys of older rlvr, read as the nested "
        f"form (`rlvr config show` prints it; docs/config.md): {'; '.join(keys)}"
    )
    if line not in _NOTED:
        _NOTED.add(line)
        print(line, file=sys.stderr, flush=True)
