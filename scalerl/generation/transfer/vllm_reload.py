"""The worker-side lifecycle scalerl's vLLM weight-transfer data planes share
(``scalerl_inline`` in vllm_transfer.py, ``scalerl_gloo`` in vllm_gloo.py): vLLM's
checkpoint-format layerwise reload (docs/vllm.md). Its own module so that both planes
build on it and the plugin (``vllm_transfer.register``) imports both, one way."""
from __future__ import annotations

from typing import Any

from vllm.distributed.weight_transfer.base import WeightTransferEngine


class LayerwiseReload(WeightTransferEngine):
    """The worker-side lifecycle scalerl's data planes share (``scalerl_inline`` in vllm_transfer.py, ``scalerl_gloo``
    in vllm_gloo.py): vLLM's checkpoint-format layerwise reload around the ``(name, tensor)`` pairs
    a subclass's ``receive_weights`` feeds to ``load_weights``."""

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class synchronises the accelerator after receiving, which a CPU
        # worker does not have; the copies into the model are synchronous on CPU and ordered on GPU.
        self.receive_weights(self.parse_update_info(update_info))

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)
