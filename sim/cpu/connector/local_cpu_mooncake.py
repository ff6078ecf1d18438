"""The local-cpu runner's one connector module: vLLM's own MooncakeConnector, made to start on a CPU engine.

Local runners only (configs/launch.yaml `kv-connector-module`; `make lint` refuses it anywhere else). The
job ships this folder with the run and puts it on the engines' PYTHONPATH; every MooncakeConnector of the
job's `--kv-transfer-config` names it as `kv_connector_module_path`. It changes two things, nothing else:

1. docs/upstream-facts.md#gpu-less-engines: MooncakeConnectorWorker.__init__ asks
   torch.accelerator.current_device_index(), which raises "Cannot access accelerator device when none is
   available" on a machine without one (vLLM 0.32 and 0.33 alike). Here that call answers 0 when no
   accelerator is present, and is the original call otherwise.
2. Known issue vllm-multiconnector-prom-metrics (configs/known-issues.yaml; the workaround a config records
   as `local-connector-module`): vLLM before 0.33 asserts, in MultiConnector's Prometheus observer, that
   every child reporting transfer stats registered Prometheus metrics, and MooncakeConnector registers
   none, so the prefill's API server dies after its first PD request. The class below keeps the upstream
   class name (MultiConnector keys stats and metrics by it) and registers a metrics object that records
   nothing. Mooncake's transfer stats still reach the engine's periodic log line; only their Prometheus
   series (which upstream does not have) are absent. On 0.33 it is harmless: 0.33 skips such children.

And one fault, for the local cluster's tests alone: LOCAL_KV_FAULT=corrupt makes a decode (a kv_consumer)
scramble its KV cache (every layer's, negated) each time a transfer lands, so the answers it then gives
follow from KV its prompt did not make: the KV path corrupting what it moves, which only comparing answers
catches (scripts/proof.py same-answers).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorPromMetrics
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector import (
    MooncakeConnector as _UpstreamMooncakeConnector,
)

_ACCELERATOR = torch.accelerator


def _current_device_index() -> int:
    if not _ACCELERATOR.is_available():
        return 0
    return _ORIGINAL_DEVICE_INDEX()


# Once per process, however often the module is imported (each engine process imports it).
if getattr(_ACCELERATOR.current_device_index, "__module__", None) != __name__:
    _ORIGINAL_DEVICE_INDEX = _ACCELERATOR.current_device_index
    _ACCELERATOR.current_device_index = _current_device_index


class _NoPromMetrics(KVConnectorPromMetrics):
    """Registers no series and records nothing."""

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        return None


class MooncakeConnector(_UpstreamMooncakeConnector):
    """The upstream connector; only its (absent) Prometheus metrics differ, and the local fault."""

    _corrupt = os.environ.get("LOCAL_KV_FAULT") == "corrupt"

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return _NoPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        super().register_kv_caches(kv_caches)
        self._local_caches = kv_caches

    def get_finished(self, finished_req_ids: set[str]):
        sending, recving = super().get_finished(finished_req_ids)
        self._scramble_if_landed(recving)
        return sending, recving

    def get_transfer_results(self, finished_req_ids: set[str]):
        results = super().get_transfer_results(finished_req_ids)
        self._scramble_if_landed(results.finished_recving)
        return results

    def _scramble_if_landed(self, landed) -> None:
        if not (self._corrupt and landed and getattr(self, "_local_caches", None)):
            return
        with torch.no_grad():
            for cache in self._local_caches.values():
                cache.neg_()
        print(f"LOCAL KV FAULT corrupt: KV cache scrambled, {len(landed)} transfer(s) landed", flush=True)


__all__ = ["MooncakeConnector"]
