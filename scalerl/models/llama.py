"""scalerl's own Llama causal LM: the embedded model's trainer module, without transformers' modeling.

One ``nn.Module`` that trains (forward and backward, per-layer activation checkpointing and FSDP2
units, ``models/policy.py`` and ``train/sharding.py``), reads and writes the same Hugging Face
checkpoint (``config.json`` + ``model.safetensors``, HF's parameter names, so a checkpoint moves
between the two either way), and is what the sampler runs (``lean.LeanLlama`` reads its layers).
Importing transformers' modeling costs about 3 CPU-s per process (docs/testing.md); the embedded
model needs none of it.

It computes what HF's ``LlamaForCausalLM`` computes with ``attn_implementation="eager"`` (the
embedded model's setting), in HF's order of operations: RMSNorm in fp32, rotary cos/sin from
position x inverse frequency per call, scores scaled after the q·k product, softmax in fp32, the
padding row of the embedding without gradient. So log-probs agree with HF's to float rounding
and gradients to about 1e-7 relative (``tests/test_llama.py``). What it does not cover (rope
scaling, biases, attention dropout, sliding windows, other architectures) is refused on load,
naming the key; ``model=hf`` keeps transformers' modeling.

The surface the rest of scalerl uses is HF's: ``config``, ``get_decoder()`` (``.layers``,
``.embed_tokens``, ``.norm``, ``.rotary_emb``), ``get_output_embeddings()``, ``save_pretrained``,
and a body whose ``past_key_values`` takes any object with HF's cache ``update(k, v, layer)``.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

CONFIG_DEFAULTS = dict(rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                       attention_dropout=0.0, hidden_act="silu", pretraining_tp=1, pad_token_id=None)


class LlamaConfig(SimpleNamespace):
    """A checkpoint's ``config.json`` as attributes (every key kept, so a save writes it back)."""

    MODEL_TYPE = "llama"

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "LlamaConfig":
        return cls.from_dict(json.loads((Path(path) / "config.json").read_text()))

    @classmethod
    def from_dict(cls, d: dict) -> "LlamaConfig":
        c = cls(**{**CONFIG_DEFAULTS, **cls.DEFAULTS, **d})
        c._keys, c._attn_implementation = list(d), "eager"
        if not getattr(c, "num_key_value_heads", None):
            c.num_key_value_heads = c.num_attention_heads
        if not getattr(c, "head_dim", None):
            c.head_dim = c.hidden_size // c.num_attention_heads
        rope = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
        c.rope_theta = rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))
        unsupported = {"model_type": c.model_type != cls.MODEL_TYPE, **c.unsupported(), "rope_parameters.rope_type": rope.get("rope_type", "default") != "default",
                       "attention_bias": c.attention_bias, "mlp_bias": c.mlp_bias, "hidden_act": c.hidden_act != "silu",
                       "pretraining_tp": c.pretraining_tp != 1, "attention_dropout": bool(c.attention_dropout)}
        bad = [k for k, v in unsupported.items() if v]
        if bad:
            raise ValueError(f"scalerl's {cls.MODEL_TYPE} module does not compute config.json's {bad[0]}="
                             f"{getattr(c, bad[0].split('.')[0])!r}; use model=hf (transformers' modeling)")
        return c

    DEFAULTS: dict = {}
    """An architecture's own defaults for keys its config.json may leave out."""

    def unsupported(self) -> dict:
        """{key: True} for what an architecture's own settings ask and its module does not compute."""
        return {}

    def to_dict(self) -> dict:
        """The keys the checkpoint's ``config.json`` had, with their values."""
        return {k: getattr(self, k) for k in self._keys}


class Linear(nn.Linear):
    """``nn.Linear`` without an initialisation: the module's values always come from a checkpoint, and
    initialising on the meta device (``LlamaForCausalLM.empty``) imports ``torch._dynamo`` (about 1.5 CPU-s)."""

    def reset_parameters(self) -> None:
        pass


class Embedding(nn.Embedding):
    """``nn.Embedding`` without an initialisation (see ``Linear``)."""

    def reset_parameters(self) -> None:
        pass


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype  # HF: the statistics in fp32, the weight applied in the input's dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


class Rotary(nn.Module):
    """Rotary position embedding, default type (HF's ``compute_default_rope_parameters``)."""

    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.head_dim, self.base = c.head_dim, c.rope_theta
        self.attention_scaling = 1.0
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    def _inv_freq(self) -> torch.Tensor:
        return 1.0 / (self.base ** (torch.arange(0, self.head_dim, 2, dtype=torch.float) / self.head_dim))

    def reset(self) -> None:
        """Recompute the buffer (after a load that built the module on the meta device)."""
        self.inv_freq = self._inv_freq()

    def _apply(self, fn, recurse=True):
        # The inverse frequencies stay fp32 whatever dtype the module is cast to: the cos/sin
        # are computed in fp32 and then cast, as in HF's rotary embedding.
        super()._apply(fn, recurse)
        self.inv_freq = self._inv_freq().to(self.inv_freq.device)  # computed on the CPU: no meta-device arange
        return self

    @torch.no_grad()
    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (B, 1, T, D) for position_ids (B, T)."""
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=position_ids.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(dtype)[:, None], (emb.sin() * self.attention_scaling).to(dtype)[:, None]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    """Llama's attention; ``qk_norm``: an RMSNorm on each head's queries and keys before the rotary
    embedding (Qwen3's ``q_norm``/``k_norm``, ``qwen3_moe.py``)."""

    def __init__(self, c: LlamaConfig, layer_idx: int, qk_norm: bool = False):
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = c.head_dim
        self.n_heads, self.n_kv = c.num_attention_heads, c.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = Linear(c.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.k_proj = Linear(c.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.v_proj = Linear(c.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.o_proj = Linear(self.n_heads * self.head_dim, c.hidden_size, bias=False)
        if qk_norm:
            self.q_norm = RMSNorm(self.head_dim, c.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, c.rms_norm_eps)
        self.qk_norm = qk_norm

    def forward(self, x, bias, cos, sin, cache=None):
        """x (B, T, H); bias (B, 1, T, S) additive; cos/sin (B, 1, T, D). Returns (B, T, H)."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)  # (B, heads, T, D)
        k = self.k_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        if self.qk_norm:  # over each head's last dimension: the same values before or after the transpose
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        if self.n_kv != self.n_heads:  # HF's repeat_kv
            rep, s = self.n_heads // self.n_kv, k.shape[2]
            k = k[:, :, None].expand(b, self.n_kv, rep, s, self.head_dim).reshape(b, self.n_heads, s, self.head_dim)
            v = v[:, :, None].expand(b, self.n_kv, rep, s, self.head_dim).reshape(b, self.n_heads, s, self.head_dim)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling + bias
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).contiguous()
        return self.o_proj(out.reshape(b, t, -1).contiguous())


class MLP(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.gate_proj = Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """One FSDP2 unit and one activation-checkpointing unit (``models/policy.py``)."""

    qk_norm = False
    """Qwen3's per-head query and key norms (``Attention``)."""

    def __init__(self, c: LlamaConfig, layer_idx: int):
        super().__init__()
        self.self_attn = Attention(c, layer_idx, qk_norm=self.qk_norm)
        self.mlp = self.feed_forward(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, h, bias, cos, sin, cache=None):
        h = h + self.self_attn(self.input_layernorm(h), bias, cos, sin, cache)
        return h + self.mlp(self.post_attention_layernorm(h))

    def feed_forward(self, c: LlamaConfig) -> nn.Module:
        return MLP(c)


def attention_bias(attention_mask: torch.Tensor, t: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive (B, 1, T, S) mask for the last ``t`` of S positions: causal and not padding.
    attention_mask (B, S) covers the cached and the new positions. A padding query may see
    itself, so no row is empty (its output is never read: padding keys are masked for every real
    query), as in ``lean.LeanLlama``."""
    s = attention_mask.shape[1]
    q_at = torch.arange(s - t, s, device=attention_mask.device)[:, None]
    k_at = torch.arange(s, device=attention_mask.device)[None, :]
    allowed = ((k_at <= q_at) & attention_mask.bool()[:, None, :]) | (k_at == q_at)
    bias = torch.zeros(allowed.shape, dtype=dtype, device=attention_mask.device)
    return bias.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


class LlamaModel(nn.Module):
    """The decoder body (HF's ``model.`` prefix)."""

    layer_class = DecoderLayer

    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.config = c
        self.embed_tokens = Embedding(c.vocab_size, c.hidden_size, c.pad_token_id)
        self.layers = nn.ModuleList(self.layer_class(c, i) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary_emb = Rotary(c)

    def forward(self, input_ids, attention_mask, position_ids, past_key_values=None, use_cache=False):
        """input_ids/position_ids (B, T), attention_mask (B, S) over cached + new positions.
        Returns ``.last_hidden_state`` (B, T, H) and ``.past_key_values`` (the cache, updated)."""
        h = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(position_ids, h.dtype)
        bias = attention_bias(attention_mask, input_ids.shape[1], h.dtype)
        for layer in self.layers:
            h = layer(h, bias, cos, sin, past_key_values)
        return SimpleNamespace(last_hidden_state=self.norm(h), past_key_values=past_key_values)


class LlamaForCausalLM(nn.Module):
    """Body + LM head, with HF's parameter names (``model.layers.0.self_attn.q_proj.weight``, ...).
    Built uninitialised: ``from_pretrained`` (or ``empty`` and a fill) gives it its values; the
    embedded model's random initialisation is transformers' (``tiny.build_tiny_checkpoint``)."""

    config_class, body_class = LlamaConfig, LlamaModel

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.model = self.body_class(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def get_decoder(self) -> LlamaModel:
        return self.model

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        """Full logits (B, T, V), for tests and tools; the trainer goes through ``CompletionLogits``."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if position_ids is None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        h = self.model(input_ids, attention_mask, position_ids).last_hidden_state
        return SimpleNamespace(logits=self.lm_head(h))

    # ------------------------------------------------------------ checkpoints (HF's format)

    @classmethod
    def empty(cls, config: LlamaConfig, dtype: torch.dtype) -> "LlamaForCausalLM":
        """Parameters on the meta device (``models/load.py``'s ``CheckpointUnits`` fills them), real buffers."""
        # Built on the CPU, uninitialised (untouched pages cost no memory), then moved: constructing under
        # torch.device("meta") runs its factory functions through torch._refs, which imports torch._dynamo.
        model = cls(config).to(device="meta", dtype=dtype)
        model.model.rotary_emb.reset()
        return model

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu") -> "LlamaForCausalLM":
        from safetensors.torch import load_file

        path = Path(path)
        model = cls.empty(cls.config_class.from_pretrained(path), dtype)
        state = load_file(str(path / "model.safetensors"))
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        state = {k: v.to(dtype) for k, v in state.items()}
        missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
        missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
        if missing or unexpected:
            raise KeyError(f"{path}: checkpoint does not match the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
        if model.config.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
        return model.to(device)

    def save_pretrained(self, out: str | Path, state_dict: dict | None = None, safe_serialization: bool = True) -> None:
        """``config.json`` + ``model.safetensors`` with HF's names, loadable by transformers."""
        from safetensors.torch import save_file

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        state = dict(self.state_dict() if state_dict is None else state_dict)
        if self.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        dtype = next(iter(state.values())).dtype
        config = {**self.config.to_dict(), "dtype": str(dtype).removeprefix("torch.")}
        (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(out / "model.safetensors"),
                  metadata={"format": "pt"})
