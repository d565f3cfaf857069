"""Evaluation workers beyond one process: on a Ray cluster, one actor per GPU, behind the surface of an
Evaluator (`prepare`, `evaluate`, `device`, `source`, `close`). Ray is optional: `pip install 'kfoundry[ray]'`.
(Several GPUs of one machine without Ray: kfoundry.evaluate.parent.pool.EvaluatorPool.)"""

from kfoundry.distributed.cluster import ClusterError, cluster_address, connect, disconnect, require_ray
from kfoundry.distributed.ray_evaluator import ClusterPrepared, RayEvaluator

__all__ = ["ClusterError", "ClusterPrepared", "RayEvaluator", "cluster_address", "connect", "disconnect",
           "require_ray"]
