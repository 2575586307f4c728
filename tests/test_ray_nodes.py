"""A node lost mid-step: a two-node Ray cluster simulated on this machine
(``ray.cluster_utils.Cluster``, one CPU per node); the node holding a rollout worker is removed
while that worker samples step 2; the worker is recreated on the surviving node and the run's
metrics equal one process's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_ray import TESTS, comparable, local_config, ray_config, run_once
from test_trainer import step_rows

from rlvr.config import build_config
from rlvr.trainer import train

ray = pytest.importorskip("ray", reason="distributed.backend: ray needs Ray (rlvr[ray])")


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    # the workers at the driver's priority, as rlvr's own instances (test_ray's cluster)
    head = {"num_cpus": 1, "_system_config": {"worker_niceness": 0}}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    node = cluster.add_node(num_cpus=1)
    path = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)
    ray.init(address=cluster.address, runtime_env={"env_vars": {"PYTHONPATH": path}})
    cluster.wait_for_nodes()
    yield cluster, node
    ray.shutdown()
    cluster.shutdown()


def test_a_lost_node_is_survived_with_the_same_metrics(
    two_nodes, tmp_path, tmp_path_factory, monkeypatch, capfd
):
    from rlvr.trainer.backends import ray as ray_backend

    cluster, node = two_nodes
    factory = tmp_path_factory  # one process's run, shared with test_ray (same xdist worker)
    removed = []

    def remove_node_in_step_two(rollouts, index):
        on_node = rollouts.where[index]["node"] == node.node_id
        if on_node and not removed and rollouts.version == 1:
            cluster.remove_node(node)
            removed.append(index)

    original = ray_backend.RayRollouts.__init__

    def with_hook(self, *args, **kwargs):
        original(self, *args, **kwargs)
        assert any(w["node"] == node.node_id for w in self.where), "no worker on the 2nd node"
        self.before_get = remove_node_in_step_two

    monkeypatch.setattr(ray_backend.RayRollouts, "__init__", with_hook)
    run_dir = tmp_path / "ray"
    train(build_config(ray_config(run_dir, 2, distributed={"cpus_per_worker": 0.3})))
    assert len(removed) == 1
    assert f"rollout worker {removed[0]} failed" in capfd.readouterr().err
    assert comparable(step_rows(run_dir)) == run_once("local", local_config(Path("x")), factory)
