"""Rewards: verifiers that score a completion against a reference answer."""

from rlvr.rewards.verifiers import extract_answer, numeric_match, numeric_reward, parse_number

__all__ = ["extract_answer", "numeric_match", "numeric_reward", "parse_number"]
