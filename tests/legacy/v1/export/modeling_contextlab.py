"""contextlab's GPT and ContextLM as transformers models (self-contained: imports torch and transformers).

This file is copied into every export that Llama cannot express (GELU MLP, ContextLM, an MTP
model's next-token GPT), so ``AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True)``
runs it where contextlab is not installed; contextlab registers the same classes for its own
loading. The parameter names are those of contextlab's modules (under ``gpt.``), so weights
map 1:1, and the computation is the same: pre-norm RMSNorm blocks, fused qkv, RoPE in the
half-split convention with contextlab's extensions (none, pi, ntk, yarn), GELU (exact) or
SwiGLU, padded vocabulary rows cut from the logits; a ContextLM pools chunks of w tokens,
predicts the next chunk's context with a causal predictor and fuses it after block
``encoder_layers``. In fp32 on CPU its logits equal contextlab's bit for bit (RMSNorm is
computed as contextlab's kernel computes it); the tests check that.

KV cache: ``use_cache=True`` (``generate``'s default) keeps every block's keys and values in a
``transformers`` ``DynamicCache``; positions and masks follow the 2-D attention mask, so left
padding gets no position and is never attended. A ContextLM pools each row's chunks from its
real tokens only (chunk k = the row's positions k*w .. k*w+w-1, whatever padding precedes them).
Trade-off: with a cache, a ContextLM keeps the encoder outputs of every position beside it and
re-runs its small chunk predictor over all complete chunks at every step (the blocks are
cached, the predictor is not: O(chunks) per step, and exactly the numbers of the full forward).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from transformers import DynamicCache, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_contextlab import ContextlabContextLMConfig, ContextlabGPTConfig

# transformers >= 5.24 names the KV cache ``cache`` (in outputs and generate's model inputs);
# earlier versions ``past_key_values``: this file speaks the installed version's name
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"

# --- rotary positions ------------------------------------------------------------------


def inv_frequencies(config):
    """(inverse frequencies (hs/2,) fp32, attention scale) of the config's RoPE and its extension."""
    hs = config.n_embd // config.n_head
    base, s, method = float(config.rope_base), float(config.rope_factor), config.rope_extension
    if method == "ntk":
        base = base * s ** (hs / (hs - 2))
    theta = 1.0 / (base ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
    if method == "pi":
        return theta / s, 1.0
    if method != "yarn":
        return theta, 1.0
    original = int(config.rope_original_context or config.context)

    def boundary(turns):
        return hs * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(boundary(32.0)), 0), min(math.ceil(boundary(1.0)), hs - 1)
    high = high + 1e-3 if high == low else high
    j = torch.arange(hs // 2, dtype=torch.float32)
    keep = 1.0 - ((j - low) / (high - low)).clamp(0.0, 1.0)
    scale = 1.0 if s <= 1.0 else 0.1 * math.log(s) + 1.0
    return theta / s * (1.0 - keep) + theta * keep, scale


def rope_tables(positions, config):
    """cos = [cos, cos], sin = [-sin, sin] of positions (...,) -> (..., hs) fp32, times the scale."""
    inv_freq, scale = inv_frequencies(config)
    angles = positions.to(torch.float32)[..., None] * inv_freq.to(positions.device)  # (..., hs/2)
    cos, sin = angles.cos(), angles.sin()
    return torch.cat((cos, cos), -1) * scale, torch.cat((-sin, sin), -1) * scale


def apply_rope(x, cos, sin):
    """Rotate the pairs (x[i], x[i + hs/2]) of x (..., hs)."""
    return torch.addcmul(x * cos, x.roll(x.size(-1) // 2, dims=-1), sin)


# --- the block -------------------------------------------------------------------------


class RMSNorm(nn.RMSNorm):
    """nn.RMSNorm computed as contextlab's fp32 kernel computes it (same rounding, same logits)."""

    def forward(self, x):
        if x.dtype != torch.float32 or self.weight.dtype != torch.float32:
            return super().forward(x)
        ss = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_()
        rstd = ss.div_(x.size(-1)).add_(self.eps if self.eps is not None else 1e-6).rsqrt_()
        return torch.mul(x, rstd).mul_(self.weight)


def mlp_width(config):
    if config.mlp_hidden is not None:
        return config.mlp_hidden
    if config.mlp == "swiglu":
        return -(-int(2 / 3 * config.mlp_ratio * config.n_embd) // 64) * 64
    return int(config.mlp_ratio * config.n_embd)


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head, self.hs = config.n_head, config.n_embd // config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x, rope, mask, is_causal=True, cache=None, layer=0):
        B, T, C = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_head, self.hs)  # (B, T, 3, nh, hs)
        cos, sin = (t.to(qkv.dtype)[..., None, None, :] for t in rope)  # ([B,] T, 1, 1, hs)
        q, k = (t.transpose(1, 2) for t in apply_rope(qkv[:, :, :2], cos, sin).unbind(2))  # (B, nh, T, hs)
        v = qkv[:, :, 2].transpose(1, 2)  # (B, nh, T, hs)
        if cache is not None:  # the cached prefix plus these tokens: (B, nh, S, hs)
            k, v = cache.update(k, v, layer)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal and mask is None
        )  # (B, nh, T, hs)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.swiglu, hidden = config.mlp == "swiglu", mlp_width(config)
        self.up = nn.Linear(config.n_embd, (2 if self.swiglu else 1) * hidden, bias=config.bias)
        self.down = nn.Linear(hidden, config.n_embd, bias=config.bias)

    def forward(self, x):
        h = self.up(x)
        if self.swiglu:
            gate, value = h.chunk(2, dim=-1)
            return self.down(F.silu(gate) * value)
        return self.down(F.gelu(h))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.attn = Attention(config)
        self.norm2 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, rope, mask, is_causal=True, cache=None, layer=0):
        x = x + self.attn(self.norm1(x), rope, mask, is_causal, cache, layer)
        return x + self.mlp(self.norm2(x))


class Fusion(nn.Module):
    """h + the broadcast predicted context: plain, gated or normalised (contextlab's ContextFusion)."""

    def __init__(self, config):
        super().__init__()
        self.mode = config.fusion
        if self.mode == "gated":
            self.gate = nn.Parameter(torch.zeros(config.n_embd))
        elif self.mode == "normalised":
            self.norm = nn.RMSNorm(config.n_embd, eps=config.norm_eps)
            self.gain = nn.Parameter(torch.full((config.n_embd,), config.init_std))

    def forward(self, h, context):
        if self.mode == "gated":
            return h + self.gate.to(context.dtype) * context
        if self.mode == "normalised":
            return h + self.gain.to(context.dtype) * self.norm(context)
        return h + context


# --- the model -------------------------------------------------------------------------


class ContextlabTransformer(nn.Module):
    """Embedding, blocks, final norm and (padded) output layer; a ContextLM adds predictor and fusion."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        padded = -(-config.vocab_size // 64) * 64
        self.wte = nn.Embedding(padded, config.n_embd)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.final_norm = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.n_embd, padded, bias=False)
        self.contextlm = hasattr(config, "chunk_size")
        if self.contextlm:
            self.predictor = nn.ModuleList([Block(config) for _ in range(config.predictor_layers)])
            self.fusion = Fusion(config)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.wte.weight

    def mix(self, i, x, positions, cache=None, real=None, past=0):
        """After block ``encoder_layers`` of a ContextLM: fuse the broadcast predicted context.

        positions (B, T) or (T,): the new tokens' positions in their rows; real (B, S) 0/1: which of
        the row's tokens so far (cached ones included) are real (left padding = 0), or None; past: the
        number of tokens the cache held before this forward."""
        if not self.contextlm or i != self.config.encoder_layers:
            return x
        h = x  # (B, T, C) encoder outputs of these tokens; with a cache, of every token so far
        if cache is not None:
            if past > 0:
                h = torch.cat([cache.contextlab_h[:, :past], x], dim=1)
            cache.contextlab_h = h
        B, S, _ = h.shape
        lengths = real.long().sum(-1) if real is not None else torch.full((B,), S, device=x.device)
        return self.fusion(x, self.contexts(h, S - lengths, positions))

    def contexts(self, h, offset, positions):
        """ĉ_{(t+1)//w} (B, T, C) for the tokens at ``positions``; a row's real tokens start at ``offset``."""
        B, S, C = h.shape
        w = self.config.chunk_size
        n = S // w  # chunks of the longest row (shorter rows' extra chunks come after theirs: causal)
        cols = (offset[:, None] + torch.arange(n * w, device=h.device)).clamp(max=S - 1)  # (B, n*w)
        c = h.gather(1, cols[..., None].expand(B, n * w, C)).view(B, n, w, C).mean(dim=2)  # (B, n, C)
        if n > 0:
            chunk_rope = rope_tables(torch.arange(n, device=h.device) * w, self.config)  # at first tokens
            for block in self.predictor:
                c = block(c, chunk_rope, None)  # causal over chunks
        first = h.gather(1, offset[:, None, None].expand(B, 1, C))  # c_init = h at the row's position 0
        preds = torch.cat([first, c], dim=1)  # (B, n + 1, C)
        j = ((positions + 1) // w).clamp(max=n).expand(B, -1)  # (B, T)
        return preds.gather(1, j[..., None].expand(*j.shape, C))

    def forward(self, idx, mask=None, positions=None, is_causal=True, cache=None, real=None):
        """Token ids (B, T) -> (logits (B, T, vocab_size), residual stream at every layer, final hidden)."""
        if positions is None:
            positions = torch.arange(idx.size(1), device=idx.device)
        rope = rope_tables(positions, self.config)  # ([B,] T, hs) each
        past = cache.get_seq_length() if cache is not None else 0
        x = self.wte(idx)  # (B, T, C)
        layers = [x]
        x = self.mix(0, x, positions, cache, real, past)
        for i, block in enumerate(self.blocks, start=1):
            x = self.mix(i, block(x, rope, mask, is_causal, cache, i - 1), positions, cache, real, past)
            layers.append(x)
        hidden = self.final_norm(x)
        return self.lm_head(hidden)[..., : self.config.vocab_size], layers, hidden


def attention_rule(real, past, T, device):
    """(mask, is_causal) of T new tokens after ``past`` cached ones; real (B, past + T) 0/1 or None.

    A mask is (B, 1, T, S) or (T, S) bool: causal, real keys only, each pad query sees itself."""
    S = past + T
    if real is None or bool(real.all()):
        if past == 0:
            return None, True  # the plain causal case: SDPA's fastest path
        if T == 1:
            return None, False  # one new token sees every cached one
        return torch.ones(T, S, dtype=torch.bool, device=device).tril(past), False
    causal = torch.ones(T, S, dtype=torch.bool, device=device).tril(past)
    own = torch.zeros(T, S, dtype=torch.bool, device=device)
    own[torch.arange(T), torch.arange(past, S)] = True  # no query row is fully masked
    return (real.bool()[:, None, None, :] & causal) | own, False


class ContextlabGPTForCausalLM(PreTrainedModel, GenerationMixin):
    """transformers face of a contextlab GPT: logits, loss with the usual shift, generate()."""

    config_class = ContextlabGPTConfig
    base_model_prefix = "gpt"
    main_input_name = "input_ids"
    _no_split_modules = ["Block"]
    # transformers 5 maps tied target -> source; 4.x lists the tied keys
    _tied_weights_keys = (
        {"gpt.lm_head.weight": "gpt.wte.weight"}
        if int(transformers.__version__.split(".")[0]) >= 5
        else ["gpt.lm_head.weight"]
    )

    def __init__(self, config):
        super().__init__(config)
        self.gpt = ContextlabTransformer(config)
        self.post_init()

    def _init_weights(self, module):
        pass  # from_pretrained loads every weight

    def get_input_embeddings(self):
        return self.gpt.wte

    def get_output_embeddings(self):
        return self.gpt.lm_head

    def prepare_inputs_for_generation(
        self, input_ids, past_key_values=None, attention_mask=None, use_cache=None, cache=None, **kwargs
    ):
        """The tokens the cache does not hold yet (all of them without a cache), the full 2-D mask."""
        cache = cache if cache is not None else past_key_values
        if cache is not None and cache.get_seq_length() > 0:
            input_ids = input_ids[:, cache.get_seq_length() :]
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            CACHE_FIELD: cache,
            "use_cache": use_cache,
        }

    def forward(
        self,
        input_ids,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        use_cache=None,
        labels=None,
        output_hidden_states=None,
        return_dict=None,
        cache=None,
        **kwargs,
    ):
        past_key_values = cache if cache is not None else past_key_values
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        cache = past_key_values if use_cache else None
        past = cache.get_seq_length() if cache is not None else 0
        T = input_ids.size(1)
        if attention_mask is not None and attention_mask.size(-1) != past + T:
            raise ValueError(f"attention_mask covers {attention_mask.size(-1)} tokens, expected {past + T}")
        if position_ids is None:
            if attention_mask is None:
                position_ids = torch.arange(past, past + T, device=input_ids.device)
            else:  # left padding gets no position: each row counts its real tokens
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]  # (B, T)
        mask, is_causal = attention_rule(attention_mask, past, T, input_ids.device)
        logits, layers, hidden = self.gpt(input_ids, mask, position_ids, is_causal, cache, attention_mask)
        loss = None
        if labels is not None:  # predict token t+1 from positions <= t
            shifted = logits[:, :-1].float()
            loss = F.cross_entropy(
                shifted.reshape(-1, shifted.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100
            )
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        # HF convention: n_layer + 1 states, embeddings first, the last one after the final norm
        hidden_states = (*layers[:-1], hidden) if output_hidden_states else None
        result = CausalLMOutputWithPast(
            loss=loss, logits=logits, hidden_states=hidden_states, **{CACHE_FIELD: cache}
        )
        use_dict = return_dict if return_dict is not None else self.config.return_dict
        return result if use_dict else result.to_tuple()


class ContextlabContextLMForCausalLM(ContextlabGPTForCausalLM):
    """transformers face of a ContextLM (same forward, loss and generate as the GPT one)."""

    config_class = ContextlabContextLMConfig
