"""The policy: an HF causal LM body plus a precision-controlled LM head.

The generator goes through ``Policy`` and the trainer through
``CompletionLogits`` (one ``nn.Module``, the unit FSDP2 roots), both with the
precision axis's head functions (arXiv 2510.13786 §3.2, "FP32 LM head in both
generator and trainer"); only the head function differs per side.
"""
from __future__ import annotations

import inspect
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from scalerl.models.buckets import MIN_SAVED, length_buckets
from scalerl.models.head_stats import NOT_LINEAR, LinearHeadStats, linear_head_dtype
from scalerl.models.lean import LeanCache, LeanLlama, lean_supported
from scalerl.models.routing import RouterHooks, right_align
from scalerl.models.llama import LlamaForCausalLM
from scalerl.precision.base import HeadFn


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids for left-padded rows: 0 at each row's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position. logits (N, T, V) fp32, targets (N, T) -> (N, T)."""
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution. logits (N, T, V) -> (N, T)."""
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


HEAD_CHUNK_BYTES = 256 * 2**20
"""``head_chunk=0`` (auto): positions per LM-head chunk such that one chunk's fp32 logits take
256 MiB: 441 positions at Qwen2's vocabulary of 151,936; the embedded model's whole minibatch."""


def auto_head_chunk(vocab: int) -> int:
    return max(1, HEAD_CHUNK_BYTES // (4 * vocab))


def chunked_token_stats(hidden: torch.Tensor, weight: torch.Tensor, head: HeadFn, targets: torch.Tensor,
                        temperature: float, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(target) and the entropy per position, never holding more than ``chunk`` positions'
    logits. hidden (N, T, H), weight (V, H), targets (N, T) -> logp (N, T) with gradient,
    entropy (N, T) without (a metric).

    Each chunk of positions (of the flattened N*T, so one long row splits too) runs ``head`` --
    the precision axis's head function, unchanged: in fp32 where the axis says so -- then the
    same log-softmax as ``token_logprobs``, under ``torch.utils.checkpoint``: only its (n,)
    outputs are kept, and the backward recomputes the chunk's logits. The peak is one chunk's
    logits and their softmax, not (N, T, V).

    The precision axis's linear heads (``linear_head``) take ``LinearHeadStats`` instead: the same
    arithmetic, with a backward that sums the weight gradient in one buffer in place (why:
    ``head_stats.py``). Any other head function takes the checkpointed path below.

    Why not a fused kernel (Liger-Kernel's fused linear cross-entropy, cut-cross-entropy) on GPU:
    both fold the backward into a loss they reduce themselves, while the RL losses here take
    per-token log-probs through nonlinear, ratio-dependent weights (CISPO, PPO clips, GSPO's
    sequence ratio), so the upstream gradient per token is only known after the forward; the
    entropy metric and the axis's fp32-head matmul would need kernels of their own too. The
    recompute costs one extra head matmul per chunk (about 1/(3 x layers) of the step's FLOPs
    at 0.5B: a few percent), measured in ``benchmarks/RESULTS.md``.
    """
    n, t = targets.shape
    flat_h, flat_y = hidden.reshape(n * t, hidden.shape[-1]), targets.reshape(n * t)
    head_dtype = linear_head_dtype(head)
    if head_dtype is not NOT_LINEAR:  # the axis's linear heads: one autograd function (head_stats.py)
        logp, ent = LinearHeadStats.apply(flat_h, weight, flat_y, head_dtype, temperature, chunk)
        return logp.view(n, t), ent.view(n, t)
    logps, ents = [], []
    for start in range(0, n * t, chunk):
        h, y = flat_h[start : start + chunk], flat_y[start : start + chunk]
        if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
            lp, ent = checkpoint(_head_stats, h, weight, y, head, temperature, use_reentrant=False)
        else:
            lp, ent = _head_stats(h, weight, y, head, temperature)
        logps.append(lp)
        ents.append(ent)
    return torch.cat(logps).view(n, t), torch.cat(ents).view(n, t)


def _head_stats(h, weight, y, head: HeadFn, temperature: float):
    """One chunk: the same operations as the unchunked path (``CompletionLogits``, then the
    update's temperature, ``token_logprobs`` and ``token_entropy``), in the same order."""
    logits = head(h, weight).float()  # (n, V)
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    with torch.no_grad():
        ent = -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, y.unsqueeze(-1)).squeeze(-1), ent


class PromptKV:
    """The prompt pass's cache for scalerl's own module (``llama.py``); ``hf_cache.PromptCache``
    for transformers': the keys/values per layer, a repeated write to a layer replacing them, so an
    activation-checkpointing replay of the pass leaves the same cache."""

    def __init__(self):
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def update(self, key_states, value_states, layer_idx):
        if layer_idx < len(self.keys):
            self.keys[layer_idx], self.values[layer_idx] = key_states, value_states
        else:
            self.keys.append(key_states)
            self.values.append(value_states)
        return key_states, value_states


class PrefixKV:
    """The completion pass's read-only view of the prompt's keys/values (``hf_cache.PrefixCache``
    for transformers'): each layer attends to prefix + its own keys, nothing is stored."""

    def __init__(self, keys: list, values: list):
        self.keys, self.values = list(keys), list(values)

    @classmethod
    def of(cls, prompt: PromptKV) -> "PrefixKV":
        return cls(prompt.keys, prompt.values)

    def update(self, key_states, value_states, layer_idx):
        return (torch.cat([self.keys[layer_idx], key_states], dim=-2),
                torch.cat([self.values[layer_idx], value_states], dim=-2))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.keys = [t.repeat_interleave(repeats, dim=0) for t in self.keys]
        self.values = [t.repeat_interleave(repeats, dim=0) for t in self.values]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.keys = [t[indices, ...] for t in self.keys]
        self.values = [t[indices, ...] for t in self.values]


def trainer_caches(model) -> tuple[type, type]:
    """(prompt cache, prefix cache) classes for ``model``: transformers' only for its modeling."""
    if isinstance(model, LlamaForCausalLM):
        return PromptKV, PrefixKV
    from scalerl.models.hf_cache import PrefixCache, PromptCache  # transformers: only for its own modeling

    return PromptCache, PrefixCache


def checkpoint_layers(model: torch.nn.Module, enabled: bool = True) -> int:
    """Activation checkpointing per decoder layer (``model.activation_checkpointing``): each
    layer keeps only its input and recomputes the rest in the backward. torch's composable
    ``checkpoint`` works by module hooks, so parameter names are unchanged (checkpoints, weight
    pushes) and it composes with FSDP2's ``fully_shard`` (apply it first, as ``setup.py`` does).
    The trainer's caches (``PromptCache``, ``PrefixCache``) make a replay exact; HF's own
    gradient checkpointing would drop the shared prompt cache instead. Called again, it switches
    the hooks on or off (``enabled``; ``benchmarks/gpu_bench.py`` measures both). Returns the
    number of layers."""
    from torch.distributed._composable import checkpoint as composable_checkpoint

    layers = list(getattr(decoder(model), "layers", []))
    for layer in layers:
        state = composable_checkpoint.state(layer)
        if state is not None:
            state.enable_hook = enabled
        elif enabled:
            composable_checkpoint(layer)
    return len(layers)


def decoder(model: torch.nn.Module) -> torch.nn.Module:
    """The model's decoder body (embeddings, layers, final norm), whose forward gives the last hidden
    states. transformers' ``get_decoder`` looks for it under ``base_model_prefix``, which Llama-4's
    ``Llama4ForCausalLM`` names ``language_model`` while it keeps its body in ``model``: there it returns
    the whole causal LM, whose output has logits and no hidden states. Its ``model`` is the body."""
    body = model.get_decoder()
    inner = getattr(model, "model", None)
    return inner if body is model and isinstance(inner, torch.nn.Module) else body


def fed_positions(width: int) -> int:
    """The completion pass's positions for completions ``width`` tokens wide (``_completions``):
    token t's logits come from position t-1, so the last token is not fed: nothing reads its
    hidden state, and causal attention keeps it out of every earlier one. A 1-token completion
    still runs the pass (its output unused): under FSDP2 every rank must run the same number of
    layer forwards, whatever its rows' widths."""
    return max(width - 1, 1)


def _cache_kw(body) -> str:
    """transformers 5 renamed past_key_values -> cache; accept both."""
    params = inspect.signature(inspect.unwrap(type(body).forward)).parameters
    return "cache" if "cache" in params else "past_key_values"


def run_body(body, cache_kw: str, input_ids, attention_mask, position_ids, cache=None):
    """The decoder body. Returns (last hidden states (N, T, H), cache)."""
    kw = {cache_kw: cache, "use_cache": cache is not None}
    out = body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kw)
    new_cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    return out.last_hidden_state, new_cache


class CompletionLogits(torch.nn.Module):
    """The trainer's forward as one module: logits predicting each completion token.

    One module so that FSDP2 can root it: the embeddings, the final norm and
    the LM head are gathered when it is called, the decoder layers (their own
    FSDP units) when the body reaches them. ``head`` is the precision axis's
    trainer-side head function. Returns untempered fp32 logits; the update
    divides them by the sampling temperature.
    """

    def __init__(self, model: torch.nn.Module, head: HeadFn, head_chunk: int = 0, length_buckets: int = 1,
                 min_saved: int = MIN_SAVED):
        super().__init__()
        self.model = model
        self.head = head
        self.head_chunk = head_chunk
        """Positions per LM-head chunk when log-probs are asked for (``train.head_chunk``; 0: auto)."""
        self.length_buckets = length_buckets
        """Parts of the rows, each padded to its own longest, in the log-prob forward
        (``train.length_buckets``; 1: one grid padded to the longest row)."""
        self.min_saved = min_saved
        """The padded positions a cut must save (``MIN_SAVED``)."""
        self._cache_kw = _cache_kw(decoder(model))
        self.routers = RouterHooks.of(model)
        """An MoE's router hooks; None: a dense model."""
        self.route = None
        """The ``routing`` option's ``RouteFn`` when it replays the generator's experts (``train/setup.py``); None: own routing."""
        self.routed = None
        """An MoE's experts of the last forward: (prompt (P, W, L, k), completion (N, fed, L, k)) int16."""
        self._caches = trainer_caches(model)

    def forward(self, prompt_ids, prompt_mask, tokens, token_mask, group=1, *, temperature=None, head_chunk=None,
                experts=None):
        """prompt_ids/prompt_mask (P, W) left-padded unique prompts; tokens/token_mask
        (N, T). ``group``: an int G, the rows grouped by prompt (N = P*G), or a (N,) long
        tensor, the prompt index of each row (a micro-batch, ``train/update.py``). The prompt
        is run once and its keys/values (with their gradients) are shared by its completions:
        the same function as a full forward of every prompt+completion, with 1/G of the prompt
        compute.

        ``temperature`` None: returns the untempered logits (N, T, V) fp32. Else returns
        (logp, entropy), each (N, T), of ``tokens`` under logits / temperature; computed
        ``head_chunk`` positions at a time (``chunked_token_stats``) when N*T exceeds it
        (None: ``self.head_chunk``; 0: ``auto_head_chunk``), else from the full logits, as before.

        ``experts``: an MoE's recorded routing, (prompt experts (P, W', L, k) left-padded, completion
        experts (N, T, L, k)) as ``Generation`` holds them; with ``self.route`` set, the forwards use
        them (rollout routing replay, ``models/routing.py``). Either way ``self.routed`` gets the
        experts this forward used.
        """
        body, kw = decoder(self.model), self._cache_kw
        routers = self.routers
        replay = experts if routers is not None and self.route is not None else None
        prompt_cache = self._caches[0]
        with (routers.replaying(None if replay is None else right_align(replay[0], prompt_ids.shape[1]), self.route)
              if routers is not None else nullcontext()):
            h_prompt, cache = run_body(body, kw, prompt_ids, prompt_mask, positions_from_mask(prompt_mask),
                                       cache=prompt_cache())
        routed_prompt = routers.take(tuple(prompt_ids.shape)) if routers is not None else None
        lengths = token_mask.sum(1).tolist() if self.length_buckets > 1 and temperature is not None else []
        parts = length_buckets(lengths, self.length_buckets, self.min_saved)
        fed = fed_positions(tokens.shape[1])
        if len(parts) > 1:  # each part padded to its own longest row: the same values, fewer padded positions
            prompt_of = group if isinstance(group, torch.Tensor) else \
                torch.arange(prompt_ids.shape[0], device=tokens.device).repeat_interleave(group)
            width = tokens.shape[1]
            out, used = [], []
            for part in parts:
                idx, w = torch.as_tensor(part, device=tokens.device), max(lengths[part[0]], 1)
                part_fed = fed_positions(w)
                with self._replaying(replay, idx, part_fed):
                    lp, ent = self._completions(h_prompt, cache, prompt_mask, tokens[idx, :w], token_mask[idx, :w],
                                                prompt_of[idx], temperature, head_chunk)
                if routers is not None:  # -1 past the part's positions: its rows' last tokens, never fed by a generator
                    used.append(replay_columns(routers.take((len(part), part_fed)), fed))
                out.append((F.pad(lp, (0, width - w)), F.pad(ent, (0, width - w))))  # zero past the part's width
            back = torch.argsort(torch.as_tensor([i for part in parts for i in part], device=tokens.device))
            if routers is not None:
                self.routed = (routed_prompt, torch.cat(used)[back])
            return torch.cat([lp for lp, _ in out])[back], torch.cat([ent for _, ent in out])[back]
        with self._replaying(replay, None, fed):
            out = self._completions(h_prompt, cache, prompt_mask, tokens, token_mask, group, temperature, head_chunk)
        if routers is not None:
            self.routed = (routed_prompt, routers.take((tokens.shape[0], fed)))
        return out

    def _replaying(self, replay, rows, fed: int):
        """An MoE's routers replay the recorded completion experts of ``rows`` (None: all) over ``fed``
        positions, with ``replay`` set (``forward``); else they route on their own. A dense model: nothing."""
        if self.routers is None:
            return nullcontext()
        experts = None
        if replay is not None:
            experts = replay_columns(replay[1] if rows is None else replay[1][rows.to(replay[1].device)], fed)
        return self.routers.replaying(experts, self.route)

    def _completions(self, h_prompt, prompt_kv, prompt_mask, tokens, token_mask, group, temperature, head_chunk):
        """The completion pass over the prompts' keys/values ``prompt_kv`` and the head: what
        ``forward`` returns, for these rows (``group`` as there)."""
        body, kw = decoder(self.model), self._cache_kw
        cache = self._caches[1].of(prompt_kv)
        if isinstance(group, torch.Tensor):  # (N,) prompt index per row
            cache.batch_select_indices(group)
            pmask = prompt_mask[group]
        else:
            if group > 1:
                cache.batch_repeat_interleave(group)
            pmask = prompt_mask.repeat_interleave(group, 0)  # (N, W)
        fed = fed_positions(tokens.shape[1])
        mask = torch.cat([pmask, token_mask[:, :fed]], dim=1)  # (N, W+fed)
        pos = positions_from_mask(mask)[:, pmask.shape[1] :]
        h, _ = run_body(body, kw, tokens[:, :fed], mask, pos, cache=cache)  # (N, fed, H)
        # The last prompt position predicts token 0. Taken after the completion pass, as always: the
        # order the graph is built in fixes the order gradients are summed in, so the float rounding.
        if isinstance(group, torch.Tensor):
            first = h_prompt[group, -1:]
        else:
            first = h_prompt[:, -1:].repeat_interleave(group, 0)
        hidden = torch.cat([first, h[:, : tokens.shape[1] - 1]], dim=1)  # (N, T, H)
        weight = self.model.get_output_embeddings().weight
        if temperature is None:
            return self.head(hidden, weight).float()
        chunk = (self.head_chunk if head_chunk is None else head_chunk) or auto_head_chunk(weight.shape[0])
        if chunk < tokens.numel():
            logp, entropy = chunked_token_stats(hidden, weight, self.head, tokens, temperature, chunk)
        else:
            logits = self.head(hidden, weight).float()  # (N, T, V): the unchunked path, as before
            if temperature != 1.0:
                logits = logits / temperature
            logp, entropy = token_logprobs(logits, tokens), token_entropy(logits.detach())
        # Not a view: FSDP2 hooks the root's outputs for its backward, which an in-place op on a view would lose.
        return logp.clone(), entropy


def replay_columns(experts: torch.Tensor, fed: int) -> torch.Tensor:
    """Completion experts (N, T, L, k) for the ``fed`` positions of the completion pass (-1 beyond T)."""
    if experts.shape[1] >= fed:
        return experts[:, :fed]
    pad = experts.new_full((experts.shape[0], fed - experts.shape[1], *experts.shape[2:]), -1)
    return torch.cat([experts, pad], dim=1)


class Policy:
    """The generator's view of a model: body plus the precision axis's heads.

    ``head_weight`` overrides the model's LM head weight on the generator side
    (a generator copy in bf16 keeps an fp32 head weight for the fp32 head).
    ``lean``: sample through ``LeanLlama`` where it supports the model (``lean.py``).
    """

    def __init__(self, model: torch.nn.Module, *, gen_head: HeadFn, train_head: HeadFn,
                 head_weight: torch.Tensor | None = None, lean: bool = True):
        self.model = model
        self.body = decoder(model)
        self.head_weight = model.get_output_embeddings().weight if head_weight is None else head_weight
        self.gen_head = gen_head
        self.train_head = train_head
        self._cache_kw = _cache_kw(self.body)
        self._trainer = None
        self.lean = LeanLlama(self.body) if lean and lean_supported(model) else None
        self.routers = RouterHooks.of(model)
        """An MoE's router hooks (the generator records its experts through them); None: a dense model."""

    def new_cache(self, capacity: int):
        """An empty KV cache for ``hidden`` holding up to ``capacity`` positions per row."""
        if self.lean is not None:
            return self.lean.new_cache(capacity)
        from transformers import DynamicCache  # transformers' modeling only: scalerl's own takes the lean path

        return DynamicCache()

    def hidden(self, input_ids, attention_mask, position_ids, cache=None):
        """Run the body. Returns (last hidden states (N, T, H), cache)."""
        if isinstance(cache, LeanCache):  # only from new_cache, so self.lean is set
            return self.lean.forward(input_ids, attention_mask, position_ids, cache), cache
        return run_body(self.body, self._cache_kw, input_ids, attention_mask, position_ids, cache)

    def logits(self, hidden: torch.Tensor, side: str) -> torch.Tensor:
        """Untempered logits in fp32 storage (values may carry bf16 rounding)."""
        head = self.gen_head if side == "gen" else self.train_head
        return head(hidden, self.head_weight).float()

    def completion_logits(self, prompt_ids, prompt_mask, tokens, token_mask, group: int = 1) -> torch.Tensor:
        """The trainer's logits (``CompletionLogits``) on this policy's own model."""
        if self._trainer is None:
            self._trainer = CompletionLogits(self.model, self.train_head)
        return self._trainer(prompt_ids, prompt_mask, tokens, token_mask, group)
