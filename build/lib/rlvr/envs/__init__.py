"""Agent environments: the protocol (:mod:`rlvr.envs.base`), tool calling, built-in environments,
and the episode loop that turns them into token-exact training samples."""

from rlvr.envs.base import EnvError, Environment, Message, StepResult, load_environment_class

__all__ = ["EnvError", "Environment", "Message", "StepResult", "load_environment_class"]
