"""The second verifiers taskset of the tests (see vf_tasksets_for_tests)."""

from vf_tasksets_for_tests import RubricTaskset

__all__ = ["RubricTaskset"]
