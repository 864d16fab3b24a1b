"""The vLLM generation engine (``generation=vllm``): the only scalerl module that
drives vLLM. It runs vLLM's offline engine in its own processes and steps it
itself, so that it can:

- tag every token with the policy version it was sampled under, and apply a
  weight update between two decode steps (PipelineRL's in-flight update,
  arXiv 2510.13786 §3.1) without restarting the engine;
- return the log-probs of the distribution actually sampled: vLLM's
  ``logprobs_mode="processed_logprobs"`` gives them after temperature scaling,
  exactly what the trainer recomputes (``Policy.logits`` divides by the same
  temperature); the default ``raw_logprobs`` would ignore the temperature;
- run length interruptions (arXiv 2510.13786 §3.2) inside the engine: a row that
  reaches its interruption point ends with finish reason ``length``; a
  continuation request (prompt + free tokens + the forced phrase) then samples
  the answer within ``answer_budget`` tokens. The continuation's prefix is the
  row's own prompt and tokens, so vLLM's prefix cache serves most of its
  prefill. The phrase tokens are forced, not sampled: ``sampled`` is False there
  and the loss never sees them.

A row that has already closed its thinking (``think_end_ids``) when it reaches
its interruption point is answering: it is not interrupted, and continues with
sampled tokens up to the same cap (phrase + answer budget), as in the torch engine.

Sampling is reproducible: each request carries a seed derived from its prompt's
seed (``SamplingParams.seeds``), the sample index and the phase, so a resumed run
draws the same tokens as an uninterrupted one (given the same weights and
kernels), whatever batch or rank the prompt lands in. The streams are vLLM's own,
not the torch engine's counter-based ones: the two engines sample differently.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch
from vllm import LLM
from vllm import SamplingParams as VLLMSamplingParams
from vllm.inputs import TokensPrompt
from vllm.sampling_params import RequestOutputKind

from scalerl.core.errors import ConfigError
from scalerl.generation.engines.interface import Generation, SamplingParams
from scalerl.generation.engines.noise import mix_seed
from scalerl.generation.transfer.vllm_gloo import BACKEND as GLOO
from scalerl.generation.transfer.vllm_gloo import GlooRelay
from scalerl.generation.transfer.vllm_transfer import BACKEND as INLINE
from scalerl.generation.transfer.vllm_transfer import chunks
from scalerl.models.load import checkpoint_format

BACKENDS = {"gloo": GLOO, "inline": INLINE, "nccl": "nccl"}
"""``generation.weight_transfer``: vLLM weight-transfer backends: scalerl's (vllm_transfer.register), and
vLLM's own ``nccl``, fed by the trainer's GPU (transfer/vllm_nccl.py)."""

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


class _Row:
    """One completion being assembled (phase 1, then possibly the continuation after a forced phrase)."""

    __slots__ = ("tokens", "logprobs", "sampled", "versions", "stopped", "interrupted")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.sampled: list[bool] = []
        self.versions: list[int] = []
        self.stopped = False
        self.interrupted = False

    def extend(self, tokens: list[int], logprobs: list[float], sampled: bool, version: int) -> None:
        self.tokens += tokens
        self.logprobs += logprobs
        self.sampled += [sampled] * len(tokens)
        self.versions += [version] * len(tokens)


class VLLMGenerator:
    """A running vLLM engine behind scalerl's ``Generator`` interface."""

    def __init__(self, checkpoint: Path, *, dtype: torch.dtype, head_dtype: torch.dtype | None, seed: int,
                 enforce_eager: bool, tensor_parallel_size: int, kv_cache_bytes: int, gpu_memory_utilization: float,
                 device: torch.device, weight_transfer: str = "gloo"):
        head = "model" if head_dtype is None or head_dtype == dtype else DTYPE_NAMES[head_dtype]
        # A push arrives in the trainer's (transformers') names; vLLM loads the checkpoint's (an MoE's per-expert tensors).
        self.to_checkpoint = checkpoint_format(checkpoint)
        if self.to_checkpoint is not None and weight_transfer == "nccl":
            raise ConfigError("generation.weight_transfer", f"nccl broadcasts the trainer's tensors as they are, and "
                              f"{checkpoint}'s names differ (a mixture of experts saved per expert): use gloo or inline")
        threads = torch.get_num_threads()  # vLLM's engine core lowers this process's torch threads for serving
        self.llm = LLM(
            model=str(checkpoint), skip_tokenizer_init=True,  # token ids in and out; scalerl tokenizes
            dtype=DTYPE_NAMES[dtype],
            hf_overrides={"head_dtype": head},  # vLLM's switch for an fp32 LM head over a lower-precision body
            logprobs_mode="processed_logprobs",  # after temperature: the distribution actually sampled
            enable_prefix_caching=True,  # continuation requests after an interruption reuse their prefix
            enforce_eager=enforce_eager, tensor_parallel_size=tensor_parallel_size, seed=seed,
            kv_cache_memory_bytes=kv_cache_bytes, gpu_memory_utilization=gpu_memory_utilization,
            weight_transfer_config={"backend": BACKENDS[weight_transfer]},
            disable_log_stats=True,
            # The model in a worker process of its own, even on one device: vLLM's CPU worker binds
            # OpenMP threads and patches torch.set_num_threads, which must not happen to the trainer.
            distributed_executor_backend="mp",
        )
        torch.set_num_threads(threads)
        self.weight_transfer = weight_transfer
        self.relay: GlooRelay | None = None
        if weight_transfer == "gloo":  # rank 0 of a gloo group with vLLM's workers (transfer/vllm_gloo.py)
            self.relay = GlooRelay(self.llm, tensor_parallel_size)
        elif weight_transfer == "inline":
            self.llm.init_weight_transfer_engine({"init_info": {}})
        # nccl: the workers join the trainer's NCCL group when it forms (join_weight_group).
        self.engine = self.llm.llm_engine
        self.device = device
        self.version = 0
        self._calls = 0
        self._lock = threading.RLock()  # one engine operation (a decode step, a push) at a time
        self._pending: tuple[list[dict], int] | None = None
        self._pending_lock = threading.Lock()
        self._cache_stale = False

    # ------------------------------------------------------------------ weights
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Snapshot the weights now (the trainer keeps changing its tensors) and apply them at once
        when the engine is idle or when called from ``between_steps``; from another thread while
        generating, before the next decode step."""
        if self.weight_transfer == "nccl":
            raise TypeError("generation.weight_transfer=nccl: the trainer broadcasts to vLLM's workers "
                            "(receive_broadcast); there are no tensors to hand over here")
        if self.to_checkpoint is not None:
            named_tensors = self.to_checkpoint(named_tensors).items()
        payload = GlooRelay.snapshot(named_tensors) if self.relay is not None else list(chunks(named_tensors))
        with self._pending_lock:
            self._pending = (payload, version)
        if self._lock.acquire(blocking=False):  # idle, or called from the generating thread itself
            try:
                self._apply_pending()
            finally:
                self._lock.release()

    def _apply_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return
        payload, version = pending
        with self._lock:
            self.llm.start_weight_update()
            if self.relay is not None:
                self.relay.send(*payload)
            else:
                for update_info in payload:
                    self.llm.update_weights({"update_info": update_info})
            self._finish_update(version)

    def _finish_update(self, version: int) -> None:
        self.llm.finish_weight_update(weight_version=str(version))
        self.version = version
        # Cached prefixes were computed by the old weights: no later request may reuse them. Requests
        # in flight keep theirs (PipelineRL semantics), so then the reset waits until they finish.
        self._cache_stale = True
        self._reset_stale_cache()

    # ------------------------------------------------- vLLM's nccl data plane
    def join_weight_group(self, init_info: dict) -> None:
        """Have vLLM's workers join the trainer's NCCL group (``vllm_nccl.init_info``); returns once
        the group is formed, which needs the trainer in it too."""
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def receive_broadcast(self, update_info: dict, version: int) -> None:
        """One push from the trainer's GPU into vLLM's workers (``vllm_nccl.update_info``), now:
        the caller is between two decode steps. Returns once the workers have every chunk."""
        with self._lock:
            self.llm.start_weight_update()
            self.llm.update_weights({"update_info": update_info})
            self._finish_update(version)

    def _reset_stale_cache(self) -> None:
        if self._cache_stale and not self.engine.has_unfinished_requests():
            self._cache_stale = not self.llm.reset_prefix_cache()

    # --------------------------------------------------------------- sampling
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, *,
                 between_steps: Callable[[int], None] | None = None) -> Generation:
        n = len(prompts) * params.n
        force = [int(t) for t in params.force_ids]
        if params.interrupt_at is None or not force:
            interrupt_at = [-1] * n
        else:
            interrupt_at = [int(a) for a in params.interrupt_at.tolist()]
        prompt_seeds = params.seeds.tolist() if params.seeds is not None else list(range(len(prompts)))
        # One seed per (prompt seed, sample, phase): phase 1, then the continuation after an interruption.
        seeds = [[mix_seed(prompt_seeds[i // params.n], i % params.n, phase) % (2**31 - 1) for phase in (1, 2)]
                 for i in range(n)]
        think = [int(t) for t in params.think_end_ids]
        rows = [_Row() for _ in range(n)]
        owner: dict[str, tuple[int, int]] = {}  # request id -> (row, phase)
        self._calls += 1

        def submit(i: int, prompt: list[int], max_tokens: int, phase: int) -> None:
            rid = f"scalerl-{self._calls}-{i}-{phase}"
            sp = VLLMSamplingParams(
                n=1, temperature=params.temperature, max_tokens=max_tokens, logprobs=0, seed=seeds[i][phase - 1],
                stop_token_ids=[params.eos_token_id], detokenize=False, output_kind=RequestOutputKind.DELTA)
            self.engine.add_request(rid, TokensPrompt(prompt_token_ids=prompt), sp)
            owner[rid] = (i, phase)

        with self._lock:
            self._apply_pending()
            self._reset_stale_cache()
            for i in range(n):  # rows are grouped: prompt j owns rows j*n_per .. j*n_per+n_per-1
                budget = interrupt_at[i] if interrupt_at[i] >= 0 else params.max_new_tokens
                submit(i, list(prompts[i // params.n]), budget, phase=1)
            t = 0
            while self.engine.has_unfinished_requests():
                if between_steps is not None:
                    between_steps(t)  # may call load_weights: applied right here, between two steps
                self._apply_pending()  # an update from another thread lands here too
                t += 1
                for out in self.engine.step():
                    i, phase = owner[out.request_id]
                    c, row = out.outputs[0], rows[i]
                    new = list(c.token_ids)
                    row.extend(new, [lp[t].logprob for lp, t in zip(c.logprobs, new)], True, self.version)
                    if not out.finished:
                        continue
                    if c.finish_reason == "stop":
                        row.stopped = True
                    elif phase == 1 and interrupt_at[i] >= 0:  # reached its interruption point
                        if _contains(row.tokens, think):  # already answering: never interrupted, same cap
                            submit(i, list(prompts[i // params.n]) + row.tokens, len(force) + params.answer_budget,
                                   phase=2)
                            continue
                        row.interrupted = True
                        row.extend(force, [0.0] * len(force), False, self.version)
                        submit(i, list(prompts[i // params.n]) + row.tokens, params.answer_budget, phase=2)
        return self._assemble(rows, params.pad_token_id)

    def _assemble(self, rows: list[_Row], pad: int) -> Generation:
        n, width = len(rows), max((len(r.tokens) for r in rows), default=0)
        tokens = torch.full((n, width), pad, dtype=torch.long)
        logprobs = torch.zeros((n, width), dtype=torch.float32)
        sampled = torch.zeros((n, width), dtype=torch.bool)
        present = torch.zeros((n, width), dtype=torch.bool)
        version = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(rows):
            k = len(r.tokens)
            tokens[i, :k] = torch.tensor(r.tokens, dtype=torch.long)
            logprobs[i, :k] = torch.tensor(r.logprobs, dtype=torch.float32)
            sampled[i, :k] = torch.tensor(r.sampled, dtype=torch.bool)
            present[i, :k] = True
            version[i, :k] = torch.tensor(r.versions, dtype=torch.long)
        dev = self.device
        return Generation(tokens=tokens.to(dev), logprobs=logprobs.to(dev), sampled=sampled.to(dev),
                          present=present.to(dev),  # bool even with no rows (an empty shard of a small batch)
                          truncated=torch.tensor([not r.stopped for r in rows], dtype=torch.bool, device=dev),
                          interrupted=torch.tensor([r.interrupted for r in rows], dtype=torch.bool, device=dev),
                          version=version.to(dev))

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
        core = getattr(self.engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()


def _contains(tokens: list[int], pattern: list[int]) -> bool:
    """Whether ``pattern`` (non-empty) occurs in ``tokens`` as a contiguous run."""
    k = len(pattern)
    return k > 0 and any(tokens[j : j + k] == pattern for j in range(len(tokens) - k + 1))
