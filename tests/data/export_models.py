"""The torch models of tests/data and benchmarks/data, exported with iree-turbine as users'
models arrive: `torch` dialect MLIR with the weights either as function arguments or as module
parameters read from a parameter archive (scope `model`; the .irpa is not kept here: the
benchmarks write one of random weights, `benchmarks/common.py:write_parameters`).

torch and iree-turbine are not dependencies of the toolkit. To rerun, in a virtualenv with the
`torch` extra (the CPU build of torch, e.g. from /opt/wheels):
    python -m venv ../turbine && ../turbine/bin/pip install -e ".[torch]"
    ../turbine/bin/python tests/data/export_models.py [NAME ...]
It rewrites the *_torch.mlir files (and tiny_lm_torch.irpa, its inputs and PyTorch's logits).
benchmarks/bench_model.py builds the same modules from
MODELS to time PyTorch eager beside IREE."""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from iree.turbine import aot
from iree.turbine.aot.decompositions import extend_aot_decompositions

HERE = Path(__file__).parent
BENCHMARKS = HERE.parent.parent / "benchmarks" / "data"


class Mlp(torch.nn.Module):
    """Two Linear layers with a ReLU: two matmuls with transposed weights, bias fused."""

    def forward(self, x, w1, b1, w2, b2):
        return torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, w1, b1)), w2, b2)


class ConvBlock(torch.nn.Module):
    """conv, bias, relu, conv (NCHW: IREE turns each conv into a linalg.generic)."""

    def forward(self, x, k1, b1, k2):
        y = torch.relu(torch.nn.functional.conv2d(x, k1, b1, padding=1))
        return torch.nn.functional.conv2d(y, k2, padding=1)


class EncoderBlock(torch.nn.Module):
    """A pre-norm transformer block: layernorm, self-attention (SDPA, causal for a decoder),
    residual, layernorm, GELU feed-forward, residual."""

    def __init__(self, heads: int, causal: bool = False):
        super().__init__()
        self.heads, self.causal = heads, causal

    def forward(self, x, ln1_w, ln1_b, wqkv, bqkv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2):
        f = torch.nn.functional
        batch, seq, dim = x.shape
        h = f.layer_norm(x, (dim,), ln1_w, ln1_b)
        q, k, v = f.linear(h, wqkv, bqkv).split(dim, dim=-1)
        q, k, v = (t.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        attention = f.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + f.linear(attention.transpose(1, 2).reshape(batch, seq, dim), wo, bo)
        h = f.layer_norm(x, (dim,), ln2_w, ln2_b)
        return x + f.linear(f.gelu(f.linear(h, w1, b1)), w2, b2)


class LlamaBlock(torch.nn.Module):
    """A LLaMA-style decoder block over a prompt (prefill), no biases: RMSNorm, rotary position
    embeddings (their cos and sin tables are weights, as exports hold them), grouped-query
    causal attention (each key and value head shared by heads // kv_heads query heads),
    residual, RMSNorm, SwiGLU feed-forward, residual."""

    def __init__(self, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads

    def forward(self, x, norm1, wq, wk, wv, wo, norm2, w_gate, w_up, w_down, cos, sin):
        q, k, v = llama_qkv(self, x, norm1, wq, wk, wv, cos, sin)
        return llama_rest(self, x, q, k, v, wo, norm2, w_gate, w_up, w_down, causal=True)


def rms_norm(t, weight):
    return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def llama_qkv(block, x, norm1, wq, wk, wv, cos, sin):
    """A LLaMA block's queries, keys and values of `x` (batch x seq x dim), as heads: RMSNorm,
    the projections, rotary embeddings on the queries and keys."""
    f = torch.nn.functional
    batch, seq, _ = x.shape

    def rotate(t):  # the half-rotation of LLaMA's rotary embedding
        half = t.shape[-1] // 2
        return t * cos + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * sin

    def heads(t, n):
        return t.view(batch, seq, n, -1).transpose(1, 2)

    h = rms_norm(x, norm1)
    return (rotate(heads(f.linear(h, wq), block.heads)),
            rotate(heads(f.linear(h, wk), block.kv_heads)), heads(f.linear(h, wv), block.kv_heads))


def llama_rest(block, x, q, k, v, wo, norm2, w_gate, w_up, w_down, causal: bool):
    """The rest of a LLaMA block: grouped-query attention (each KV head repeated for its query
    heads), the output projection, residual, RMSNorm, SwiGLU feed-forward, residual."""
    f = torch.nn.functional
    batch, seq, dim = x.shape
    group = block.heads // block.kv_heads
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    attention = f.scaled_dot_product_attention(q, k, v, is_causal=causal)
    x = x + f.linear(attention.transpose(1, 2).reshape(batch, seq, dim), wo)
    h = rms_norm(x, norm2)
    return x + f.linear(f.silu(f.linear(h, w_gate)) * f.linear(h, w_up), w_down)


class LlamaDecode(torch.nn.Module):
    """One token of a LLaMA-style model's decode against its KV cache (of the KV heads): the
    block of LlamaBlock, its new key and value joined to the cache (torch.cat) before the
    grouped-query attention; the cos and sin of the token's position are weights. The output
    and the token's key and value (for the caller to append) go out."""

    def __init__(self, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads

    def forward(self, x, k_cache, v_cache, norm1, wq, wk, wv, wo, norm2, w_gate, w_up, w_down,
                cos, sin):
        q, k, v = llama_qkv(self, x, norm1, wq, wk, wv, cos, sin)
        keys, values = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
        out = llama_rest(self, x, q, keys, values, wo, norm2, w_gate, w_up, w_down, causal=False)
        return out, k, v


class ResNetStage(torch.nn.Module):
    """The entry of a ResNet-18 stage for inference, batch norms folded into the conv biases
    (as deployed models are exported): 3x3 stride-2 conv, relu, 3x3 conv, a 1x1 stride-2
    shortcut, add, relu."""

    def forward(self, x, k1, b1, k2, b2, ks, bs):
        f = torch.nn.functional
        y = torch.relu(f.conv2d(x, k1, b1, stride=2, padding=1))
        y = f.conv2d(y, k2, b2, padding=1)
        return torch.relu(y + f.conv2d(x, ks, bs, stride=2))


class InvertedResidual(torch.nn.Module):
    """A MobileNetV2 inverted residual block for inference (batch norms folded into the conv
    biases): 1x1 expansion, ReLU6, 3x3 depthwise conv, ReLU6, 1x1 projection, residual add."""

    def forward(self, x, k_expand, b_expand, k_depthwise, b_depthwise, k_project, b_project):
        f = torch.nn.functional
        y = f.relu6(f.conv2d(x, k_expand, b_expand))
        y = f.relu6(f.conv2d(y, k_depthwise, b_depthwise, padding=1, groups=y.shape[1]))
        return x + f.conv2d(y, k_project, b_project)


class GroupedBottleneck(torch.nn.Module):
    """A ResNeXt bottleneck for inference (batch norms folded into the conv biases): 1x1
    reduction, ReLU, 3x3 grouped conv, ReLU, 1x1 expansion, residual add, ReLU."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, x, k_reduce, b_reduce, k_grouped, b_grouped, k_expand, b_expand):
        f = torch.nn.functional
        y = f.relu(f.conv2d(x, k_reduce, b_reduce))
        y = f.relu(f.conv2d(y, k_grouped, b_grouped, padding=1, groups=self.groups))
        return f.relu(x + f.conv2d(y, k_expand, b_expand))


class Classifier(torch.nn.Module):
    """A CNN classifier as torchvision's end: conv, batch norm (in inference, not folded),
    ReLU, max pool, conv, hardswish, adaptive average pool to 1x1, flatten, Linear, softmax."""

    def forward(self, x, k_stem, mean, var, gamma, beta, k_body, b_body, w_head, b_head):
        f = torch.nn.functional
        # running statistics are buffers, never trained: detached where Weighted holds them
        # as parameters (batch_norm refuses statistics that require grad)
        y = f.relu(f.batch_norm(f.conv2d(x, k_stem, stride=2, padding=1), mean.detach(),
                                var.detach(), gamma, beta, training=False))
        y = f.hardswish(f.conv2d(f.max_pool2d(y, 2), k_body, b_body, padding=1))
        pooled = torch.flatten(f.adaptive_avg_pool2d(y, 1), 1)
        return torch.softmax(f.linear(pooled, w_head, b_head), -1)


class VolumeBlock(torch.nn.Module):
    """A 3-D UNet's double conv (volumes, video): Conv3d 3x3x3, batch norm (in inference),
    ReLU, Conv3d 3x3x3, ReLU."""

    def forward(self, x, k1, b1, mean, var, gamma, beta, k2, b2):
        f = torch.nn.functional
        y = f.relu(f.batch_norm(f.conv3d(x, k1, b1, padding=1), mean.detach(), var.detach(),
                                gamma, beta, training=False))
        return f.relu(f.conv3d(y, k2, b2, padding=1))


class DecodeStep(torch.nn.Module):
    """One token of an LLM's decode against its KV cache (GPT-2 style pre-norm block): the new
    token's hidden state and the cache come in; the block's output and the token's keys and
    values (for the caller to append) go out."""

    def __init__(self, heads: int):
        super().__init__()
        self.heads = heads

    def forward(self, x, k_cache, v_cache, ln1_w, ln1_b, wqkv, bqkv, wo, bo, ln2_w, ln2_b, w1,
                b1, w2, b2):
        f = torch.nn.functional
        batch, _, dim = x.shape
        h = f.layer_norm(x, (dim,), ln1_w, ln1_b)
        q, k, v = (t.view(batch, 1, self.heads, -1).transpose(1, 2)
                   for t in f.linear(h, wqkv, bqkv).split(dim, dim=-1))
        keys, values = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
        attention = f.scaled_dot_product_attention(q, keys, values)
        x = x + f.linear(attention.transpose(1, 2).reshape(batch, 1, dim), wo, bo)
        h = f.layer_norm(x, (dim,), ln2_w, ln2_b)
        return x + f.linear(f.gelu(f.linear(h, w1, b1)), w2, b2), k, v


class TinyLanguageModel(torch.nn.Module):
    """A causal language model as users export one: int64 token ids into an embedding table,
    one pre-norm causal transformer block, an LM head; the weights are module parameters
    (externalized to an .irpa), and `attention_mask` is taken but unused, as HF-style forward
    signatures carry it."""

    def __init__(self, vocab: int, dim: int, heads: int, ff: int, seq: int):
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.ln1, self.ln2, self.ln_f = (torch.nn.LayerNorm(dim) for _ in range(3))
        self.qkv, self.out = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.ff1, self.ff2 = torch.nn.Linear(dim, ff), torch.nn.Linear(ff, dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, ids, attention_mask):
        f = torch.nn.functional
        batch, seq = ids.shape
        x = self.embed(ids) + self.pos[:seq]
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attention = f.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attention.transpose(1, 2).reshape(batch, seq, -1))
        x = x + self.ff2(f.gelu(self.ff1(self.ln2(x))))
        return self.head(self.ln_f(x))


class GroupNormResBlock(torch.nn.Module):
    """A diffusion UNet's residual block (no time embedding): GroupNorm of 32 groups, SiLU and a
    3x3 convolution, twice, and the skip."""

    def forward(self, x, n1w, n1b, c1w, c1b, n2w, n2b, c2w, c2b):
        f = torch.nn.functional
        h = f.conv2d(f.silu(f.group_norm(x, 32, n1w, n1b)), c1w, c1b, padding=1)
        return x + f.conv2d(f.silu(f.group_norm(h, 32, n2w, n2b)), c2w, c2b, padding=1)


class UpBlock(torch.nn.Module):
    """A segmentation UNet's decoder step: a ConvTranspose2d 2x2 of stride 2 doubles the image
    and halves the channels, the encoder's skip is joined to it, then 3x3 conv and ReLU,
    twice."""

    def forward(self, x, skip, uw, ub, c1w, c1b, c2w, c2b):
        f = torch.nn.functional
        h = torch.cat([f.conv_transpose2d(x, uw, ub, stride=2), skip], 1)
        return f.relu(f.conv2d(f.relu(f.conv2d(h, c1w, c1b, padding=1)), c2w, c2b, padding=1))


class ConvNeXtBlock(torch.nn.Module):
    """A ConvNeXt block: a 7x7 depthwise conv, then channels-last (a permute) for a LayerNorm
    and a GELU MLP of 4x the channels, scaled per channel, permuted back onto the skip."""

    def forward(self, x, dw, db, nw, nb, w1, b1, w2, b2, gamma):
        f = torch.nn.functional
        h = f.conv2d(x, dw, db, padding=3, groups=x.shape[1]).permute(0, 2, 3, 1)
        h = f.layer_norm(h, (h.shape[-1],), nw, nb)
        return x + (gamma * f.linear(f.gelu(f.linear(h, w1, b1)), w2, b2)).permute(0, 3, 1, 2)


class PatchEmbedding(torch.nn.Module):
    """A vision transformer's stem: 16x16 patches by a stride-16 convolution, tokens, LayerNorm,
    a GELU MLP and the skip."""

    def forward(self, x, pw, pb, nw, nb, w1, b1, w2, b2):
        f = torch.nn.functional
        tokens = f.conv2d(x, pw, pb, stride=16).flatten(2).transpose(1, 2)
        h = f.layer_norm(tokens, (tokens.shape[-1],), nw, nb)
        return tokens + f.linear(f.gelu(f.linear(h, w1, b1)), w2, b2)


class Int8Mlp(torch.nn.Module):
    """A hand-quantized (W8A8) MLP as people write one: CPU PyTorch has no int8 matmul, so the
    int8 activations and weights are multiplied as int32, dequantized by a scale per output
    channel, ReLU, requantized to int8 for the second layer."""

    def forward(self, x, w1, s1, w2, s2):
        h = torch.relu(torch.matmul(x.to(torch.int32), w1.to(torch.int32)).float() * s1)
        q = torch.clamp(torch.round(h / 0.05), -128, 127).to(torch.int8)
        return torch.matmul(q.to(torch.int32), w2.to(torch.int32)).float() * s2


class EmbeddingTower(torch.nn.Module):
    """A recommender's tower: token ids looked up in an embedding table, mean-pooled, an MLP."""

    def forward(self, ids, table, w1, b1, w2, b2):
        f = torch.nn.functional
        pooled = f.embedding(ids, table).mean(1)
        return f.linear(torch.relu(f.linear(pooled, w1, b1)), w2, b2)


class AudioEncoder(torch.nn.Module):
    """A speech model's feature encoder (wav2vec 2.0's): strided 1-D convolutions over raw
    audio, the first with a GroupNorm of a group per channel, each with GELU."""

    def forward(self, x, w0, nw, nb, w1, w2, w3):
        f = torch.nn.functional
        x = f.gelu(f.group_norm(f.conv1d(x, w0, stride=5), w0.shape[0], nw, nb))
        x = f.gelu(f.conv1d(x, w1, stride=2))
        x = f.gelu(f.conv1d(x, w2, stride=2))
        return f.gelu(f.conv1d(x, w3, stride=2))


class SpeechStem(torch.nn.Module):
    """A speech recognizer's encoder stem over a log-mel spectrogram (Whisper's): a padded
    Conv1d, GELU, a padded stride-2 Conv1d, GELU, both with bias."""

    def forward(self, x, w1, b1, w2, b2):
        f = torch.nn.functional
        x = f.gelu(f.conv1d(x, w1, b1, padding=1))
        return f.gelu(f.conv1d(x, w2, b2, stride=2, padding=1))


class Tcn(torch.nn.Module):
    """A temporal convolutional network (Bai et al.'s TCN, as pytorch-tcn writes it): a 1x1
    conv to the residual's channels, then residual blocks of two dilated causal Conv1d (padded
    on both sides, the future chomped off after), ReLU; the dilation doubles each block."""

    def forward(self, x, d0, db0, a0, ab0, b0, bb0, a1, ab1, b1, bb1, a2, ab2, b2, bb2, a3, ab3,
                b3, bb3):
        f = torch.nn.functional

        def causal(t, w, b, dilation):
            pad = (w.shape[2] - 1) * dilation
            return f.conv1d(t, w, b, padding=pad, dilation=dilation)[:, :, :-pad]

        res = f.conv1d(x, d0, db0)
        blocks = [(a0, ab0, b0, bb0), (a1, ab1, b1, bb1), (a2, ab2, b2, bb2), (a3, ab3, b3, bb3)]
        for i, (a, ab, b, bb) in enumerate(blocks):
            h = torch.relu(causal(x, a, ab, 2 ** i))
            x = res = torch.relu(torch.relu(causal(h, b, bb, 2 ** i)) + res)
        return x


class LstmLayer(torch.nn.Module):
    """A one-layer LSTM over a sequence from a zero state, as torch.nn.LSTM calls it (aten.lstm:
    PyTorch's fused CPU kernel): per step, the hidden state times the hidden-to-hidden weights
    and the gates. It exports only decomposed (`Model.decompose`): torch-mlir does not lower
    aten.lstm."""

    def forward(self, x, w_ih, w_hh, b_ih, b_hh):
        zeros = x.new_zeros(1, x.shape[0], w_hh.shape[1])
        return torch.lstm(x, (zeros, zeros), [w_ih, w_hh, b_ih, b_hh], True, 1, 0.0, False,
                          False, True)[0]


class GruLayer(torch.nn.Module):
    """A one-layer GRU over a sequence from a zero state, as torch.nn.GRU calls it (aten.gru,
    exported decomposed as the LSTM is)."""

    def forward(self, x, w_ih, w_hh, b_ih, b_hh):
        zeros = x.new_zeros(1, x.shape[0], w_hh.shape[1])
        return torch.gru(x, zeros, [w_ih, w_hh, b_ih, b_hh], True, 1, 0.0, False, False, True)[0]


class RelativeAttention(torch.nn.Module):
    """T5's self-attention: no scaling, and a learned bias per head looked up by the bucket of
    each query-key distance (exact near, logarithmic far), computed from the positions in the
    graph (integer arithmetic, a log and an embedding lookup)."""

    def __init__(self, heads: int, buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.heads, self.buckets, self.max_distance = heads, buckets, max_distance

    def bucket(self, distance):
        half = self.buckets // 2
        exact = half // 2
        sign = (distance > 0).long() * half
        distance = distance.abs()
        far = exact + (torch.log(distance.float() / exact + 1e-6)
                       / math.log(self.max_distance / exact) * (half - exact)).long()
        far = torch.minimum(far, torch.full_like(far, half - 1))
        return sign + torch.where(distance < exact, distance, far)

    def forward(self, x, wqkv, wo, bias_table):
        f = torch.nn.functional
        batch, seq, dim = x.shape
        q, k, v = f.linear(x, wqkv).view(batch, seq, 3, self.heads, dim // self.heads).permute(
            2, 0, 3, 1, 4)
        positions = torch.arange(seq)
        bias = f.embedding(self.bucket(positions[None, :] - positions[:, None]), bias_table)
        scores = q @ k.transpose(-1, -2) + bias.permute(2, 0, 1)[None]
        attention = torch.softmax(scores, -1) @ v
        return f.linear(attention.transpose(1, 2).reshape(batch, seq, dim), wo)


class AlibiAttention(torch.nn.Module):
    """Causal self-attention with ALiBi (BLOOM's, MPT's): no positional embedding, a bias of
    each head's slope times the key's distance behind the query added to the scaled scores,
    the future masked to -inf, computed from the positions in the graph."""

    def __init__(self, heads: int):
        super().__init__()
        self.heads = heads

    def forward(self, x, wqkv, bqkv, wo, bo):
        f = torch.nn.functional
        batch, seq, dim = x.shape
        q, k, v = f.linear(x, wqkv, bqkv).view(batch, seq, 3, self.heads,
                                               dim // self.heads).permute(2, 0, 3, 1, 4)
        slopes = 2.0 ** (-8.0 * torch.arange(1, self.heads + 1) / self.heads)
        positions = torch.arange(seq)
        distance = (positions[None, :] - positions[:, None]).float()
        bias = slopes[:, None, None] * distance.clamp(max=0)
        bias = bias.masked_fill(distance > 0, float("-inf"))
        scores = q @ k.transpose(-1, -2) / math.sqrt(dim // self.heads) + bias[None]
        attention = torch.softmax(scores, -1) @ v
        return f.linear(attention.transpose(1, 2).reshape(batch, seq, dim), wo, bo)


class ShiftedWindowBlock(torch.nn.Module):
    """A Swin transformer's shifted-window attention (channels last): LayerNorm, a cyclic shift
    (torch.roll), the image cut into 7x7 windows, attention within each window, the windows put
    back, the shift undone, residual."""

    def __init__(self, heads: int, window: int = 7):
        super().__init__()
        self.heads, self.window = heads, window

    def forward(self, x, ln_w, ln_b, wqkv, bqkv, wo, bo):
        f = torch.nn.functional
        batch, height, width, c = x.shape
        w, shift = self.window, self.window // 2
        y = torch.roll(f.layer_norm(x, (c,), ln_w, ln_b), shifts=(-shift, -shift), dims=(1, 2))
        y = y.view(batch, height // w, w, width // w, w, c).permute(0, 1, 3, 2, 4, 5)
        q, k, v = f.linear(y.reshape(-1, w * w, c), wqkv, bqkv).view(
            -1, w * w, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = f.linear(f.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(
            -1, w * w, c), wo, bo)
        y = y.view(batch, height // w, width // w, w, w, c).permute(0, 1, 3, 2, 4, 5)
        return x + torch.roll(y.reshape(batch, height, width, c), shifts=(shift, shift),
                              dims=(1, 2))


class IndexedInputs(torch.nn.Module):
    """Integer arguments that index tensors the ways exported models do: token ids and
    position ids into embedding tables, index_select on a weight, gather along a dimension
    of an activation (its indices broadcast first), and the positions a KV cache is written
    at (index_copy: a scatter whose index vectors are concatenated columns)."""

    def __init__(self):
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(50, 16), torch.nn.Embedding(64, 16)
        self.table = torch.nn.Parameter(torch.randn(30, 16))

    def forward(self, ids, position_ids, rows, order, slots):
        x = self.tokens(ids) + self.positions(position_ids)
        picked = torch.index_select(self.table, 0, rows)
        gathered = torch.gather(x, 1, order.unsqueeze(-1).expand(1, 8, 16))
        cache = torch.zeros(1, 3, 20, 16).index_copy(2, slots, x.expand(3, 8, 16)[None])
        return x.sum(-1), picked, gathered, cache


class AdaptivePools(torch.nn.Module):
    """The global average pools that end 1-D (audio) and 3-D (video, volumes) conv nets:
    torch-mlir lowers each, as the 2-D one, to a gather over a padded copy."""

    def forward(self, signal, volume):
        f = torch.nn.functional
        return f.adaptive_avg_pool1d(signal, 1), f.adaptive_avg_pool3d(volume, 1)


class MaskedIds(torch.nn.Module):
    """Token ids and the attention mask a tokenizer gives beside them, used as BERT's export
    uses it: (1 - mask) x the float minimum added to the scores (a mask of 4 makes +inf)."""

    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(64, 16)

    def forward(self, ids, mask):
        x = self.tokens(ids)
        blocked = (1.0 - mask[:, None, :].float()) * torch.finfo(torch.float32).min
        return torch.softmax(x @ x.transpose(1, 2) + blocked, -1) @ x


class PaddedIds(torch.nn.Module):
    """Token ids and a padding mask as PyTorch's own attention takes it (nn.MultiheadAttention's
    key_padding_mask: True, a padded key, ignored): all True masks every key, and NaN."""

    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(64, 16)
        self.attention = torch.nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, ids, padded):
        x = self.tokens(ids)
        return self.attention(x, x, x, key_padding_mask=padded, need_weights=False)[0]


def export_indexed_inputs(path: Path) -> None:
    torch.manual_seed(0)
    args = (torch.randint(0, 50, (1, 8)), torch.arange(8).unsqueeze(0),
            torch.randint(0, 30, (4,), dtype=torch.int32), torch.randint(0, 8, (1, 8)),
            torch.randperm(20)[:8])
    path.write_text(str(aot.export(IndexedInputs().eval(), args=args).mlir_module))
    ids = torch.randint(0, 64, (1, 8))
    masked = aot.export(MaskedIds().eval(), args=(ids, torch.ones_like(ids)))
    path.with_name("masked_ids_torch.mlir").write_text(str(masked.mlir_module))
    padded = aot.export(PaddedIds().eval(), args=(ids, torch.zeros_like(ids, dtype=torch.bool)))
    path.with_name("padded_ids_torch.mlir").write_text(str(padded.mlir_module))


def export_language_model(path: Path, vocab: int = 96, dim: int = 32, heads: int = 2,
                          ff: int = 128, seq: int = 32) -> None:
    """`path` (torch MLIR reading its weights as parameters of scope `model`), `path`'s .irpa
    beside it, and ids, mask and PyTorch's logits as .npy."""
    torch.manual_seed(0)
    model = TinyLanguageModel(vocab, dim, heads, ff, seq).eval()
    ids = torch.randint(0, vocab, (1, seq), dtype=torch.int64)
    mask = torch.ones(1, seq, dtype=torch.int64)
    with torch.no_grad():
        logits = model(ids, mask)
    aot.externalize_module_parameters(model)
    exported = aot.export(model, args=(ids, mask))
    path.write_text(str(exported.mlir_module))
    aot.save_module_parameters(str(path.with_suffix(".irpa")), model)
    for name, array in (("ids", ids), ("mask", mask), ("logits", logits)):
        np.save(path.with_name(f"{path.stem}_{name}.npy"), array.numpy())


def encoder_args(d: int, seq: int, ff: int) -> list[tuple[int, ...]]:
    return [(1, seq, d), (d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (ff, d),
            (ff,), (d, ff), (d,)]


def llama_args(d: int, seq: int, heads: int, kv_heads: int, ff: int) -> list[tuple[int, ...]]:
    kv = kv_heads * (d // heads)
    return [(1, seq, d), (d,), (d, d), (kv, d), (kv, d), (d, d), (d,), (ff, d), (ff, d), (d, ff),
            (seq, d // heads), (seq, d // heads)]


def llama_decode_args(d: int, heads: int, kv_heads: int, cached: int,
                      ff: int) -> list[tuple[int, ...]]:
    cache = (1, kv_heads, cached, d // heads)
    return [(1, 1, d), cache, cache, *llama_args(d, 1, heads, kv_heads, ff)[1:]]


def stage_args(batch: int, c: int = 64, size: int = 56) -> list[tuple[int, ...]]:
    return [(batch, c, size, size), (2 * c, c, 3, 3), (2 * c,), (2 * c, 2 * c, 3, 3), (2 * c,),
            (2 * c, c, 1, 1), (2 * c,)]


def inverted_residual_args(c: int, expand: int, size: int) -> list[tuple[int, ...]]:
    wide = c * expand
    return [(1, c, size, size), (wide, c, 1, 1), (wide,), (wide, 1, 3, 3), (wide,),
            (c, wide, 1, 1), (c,)]


def bottleneck_args(c: int, width: int, groups: int, size: int) -> list[tuple[int, ...]]:
    return [(1, c, size, size), (width, c, 1, 1), (width,), (width, width // groups, 3, 3),
            (width,), (c, width, 1, 1), (c,)]


def classifier_args(size: int, stem: int, body: int, classes: int) -> list[tuple[int, ...]]:
    return [(1, 3, size, size), (stem, 3, 3, 3), (stem,), (stem,), (stem,), (stem,),
            (body, stem, 3, 3), (body,), (classes, body), (classes,)]


def decode_args(d: int, heads: int, cached: int, ff: int) -> list[tuple[int, ...]]:
    cache = (1, heads, cached, d // heads)
    return [(1, 1, d), cache, cache, *encoder_args(d, 1, ff)[1:]]


class Weighted(torch.nn.Module):
    """`inner` with its weight arguments held as parameters, named as the arguments are: the
    deployed form, whose forward takes only the activations."""

    def __init__(self, inner: torch.nn.Module, shapes: list[tuple[int, ...]], inputs: int,
                 int8: tuple[int, ...] = ()):
        super().__init__()
        self.inner = inner
        self.names = list(inspect.signature(inner.forward).parameters)[inputs:]
        for i, (name, shape) in enumerate(zip(self.names, shapes[inputs:]), inputs):
            kind = torch.int8 if i in int8 else torch.float32
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(shape, dtype=kind),
                                                             requires_grad=False))

    def forward(self, *activations):
        return self.inner(*activations, *(getattr(self, name) for name in self.names))


@dataclass(frozen=True)
class Model:
    make: Callable[[], torch.nn.Module]
    shapes: list[tuple[int, ...]]  # of the forward's arguments: input, then weights
    folder: Path
    # with a number: the first `inputs` arguments are the activations and the weights are
    # parameters (`Weighted`); without: every weight is a function argument
    inputs: int | None = None
    dynamic: tuple[int, ...] = ()  # the first argument's dims exported dynamic (0: the batch)
    ids: int = 0  # with a number: the first argument is token ids below it (int64)
    # ops exported as their parts (iree-turbine's table), as users must for ops torch-mlir
    # does not lower
    decompose: tuple = ()
    int8: tuple[int, ...] = ()  # the arguments (activations or weights) that are int8
    bf16: bool = False  # exported in bfloat16, as its float arguments and parameters are

    def module(self) -> torch.nn.Module:
        if self.inputs is None:
            module = self.make().eval()
        else:
            module = Weighted(self.make(), self.shapes, self.inputs, self.int8).eval()
        return module.to(torch.bfloat16) if self.bf16 else module

    def export(self, name: str) -> Path:
        path = self.folder / f"{name}_torch.mlir"
        module = self.module()
        count = len(self.shapes) if self.inputs is None else self.inputs
        if self.inputs is not None:
            aot.externalize_module_parameters(module)
        dynamic = None
        if self.dynamic:  # as users export a model for any batch or sequence length
            names = list(inspect.signature(module.forward).parameters)[:count]
            dims = {d: torch.export.Dim(f"dim{d}", min=2, max=4096) for d in self.dynamic}
            dynamic = ({"activations": (dims, *[None] * (count - 1))} if self.inputs is not None
                       else {n: (dims if i == 0 else None) for i, n in enumerate(names)})
        real = torch.bfloat16 if self.bf16 else torch.float32
        args = [torch.randint(-128, 128, s, dtype=torch.int8) if i in self.int8
                else torch.rand(s, dtype=real) for i, s in enumerate(self.shapes[:count])]
        if self.ids:
            args[0] = torch.randint(0, self.ids, self.shapes[0])
        with extend_aot_decompositions(add_ops=list(self.decompose)):
            exported = aot.export(module, args=tuple(args), dynamic_shapes=dynamic)
        path.write_text(str(exported.mlir_module))
        return path


MODELS = {
    # the tests' models
    "mlp": Model(Mlp, [(64, 256), (512, 256), (512,), (256, 512), (256,)], HERE),
    "mlp_dynamic": Model(Mlp, [(64, 256), (512, 256), (512,), (256, 512), (256,)], HERE,
                         dynamic=(0,)),
    # batch 1: IREE 3.13 drops any config on these convs (listed, not tuned); batch 2: tunable
    "conv_block": Model(ConvBlock, [(1, 16, 32, 32), (32, 16, 3, 3), (32,), (32, 32, 3, 3)], HERE),
    "conv_block_batch2": Model(ConvBlock, [(2, 16, 32, 32), (32, 16, 3, 3), (32,), (32, 32, 3, 3)],
                               HERE),
    "classifier": Model(Classifier, classifier_args(32, 16, 32, 10), HERE),
    "adaptive_pools": Model(AdaptivePools, [(2, 16, 100), (1, 16, 8, 10, 12)], HERE),
    "grouped_block": Model(lambda: GroupedBottleneck(4), bottleneck_args(32, 32, 4, 16), HERE),
    # benchmarks/bench_model.py's: weights as parameters (inputs=N), as deployed models are
    # exported, except the encoder block, kept with its weights as arguments beside its
    # parameter form (bench_store.py and the README's commands use it)
    "bert_layer": Model(lambda: EncoderBlock(12), encoder_args(768, 128, 3072), BENCHMARKS,
                        inputs=1),
    "encoder_block": Model(lambda: EncoderBlock(4), encoder_args(256, 128, 1024), BENCHMARKS),
    "encoder_block_params": Model(lambda: EncoderBlock(4), encoder_args(256, 128, 1024),
                                  BENCHMARKS, inputs=1),
    # the encoder block at twice the sequence: a related model (benchmarks/bench_store.py)
    "encoder_block_s256": Model(lambda: EncoderBlock(4), encoder_args(256, 256, 1024), BENCHMARKS),
    # the block exported for any sequence length, as language models are served
    "encoder_dynamic": Model(lambda: EncoderBlock(4), encoder_args(256, 128, 1024), BENCHMARKS,
                             inputs=1, dynamic=(1,)),
    "causal_block": Model(lambda: EncoderBlock(8, causal=True), encoder_args(512, 256, 2048),
                          BENCHMARKS, inputs=1),
    "llama_block": Model(lambda: LlamaBlock(8, 2), llama_args(512, 128, 8, 2, 1376), BENCHMARKS,
                         inputs=1),
    "resnet_stage_b1": Model(ResNetStage, stage_args(1), BENCHMARKS, inputs=1),
    "resnet_stage_b2": Model(ResNetStage, stage_args(2), BENCHMARKS, inputs=1),
    "mlp_1024": Model(Mlp, [(64, 512), (1024, 512), (1024,), (512, 1024), (512,)], BENCHMARKS,
                      inputs=1),
    "mlp_head": Model(Mlp, [(1, 256), (256, 256), (256,), (10, 256), (10,)], BENCHMARKS,
                      inputs=1),
    "mobilenet_block": Model(InvertedResidual, inverted_residual_args(24, 6, 56), BENCHMARKS,
                             inputs=1),
    "convnext_block": Model(ConvNeXtBlock, [(1, 96, 56, 56), (96, 1, 7, 7), (96,), (96,), (96,),
                                            (384, 96), (384,), (96, 384), (96,), (96,)],
                            BENCHMARKS, inputs=1),
    "resnext_block": Model(lambda: GroupedBottleneck(32), bottleneck_args(256, 256, 32, 28),
                           BENCHMARKS, inputs=1),
    "cnn_classifier": Model(Classifier, classifier_args(128, 32, 128, 1000), BENCHMARKS,
                            inputs=1),
    "gpt2_decode": Model(lambda: DecodeStep(12), decode_args(768, 12, 511, 3072), BENCHMARKS,
                         inputs=3),
    "llama_decode": Model(lambda: LlamaDecode(8, 2), llama_decode_args(512, 8, 2, 511, 1376),
                          BENCHMARKS, inputs=3),
    "unet_resblock": Model(GroupNormResBlock, [(1, 128, 32, 32), (128,), (128,), (128, 128, 3, 3),
                                               (128,), (128,), (128,), (128, 128, 3, 3), (128,)],
                           BENCHMARKS, inputs=1),
    "unet_up": Model(UpBlock, [(1, 128, 32, 32), (1, 64, 64, 64), (128, 64, 2, 2), (64,),
                               (64, 128, 3, 3), (64,), (64, 64, 3, 3), (64,)], BENCHMARKS,
                     inputs=2),
    "vit_patch_embed": Model(PatchEmbedding, [(1, 3, 224, 224), (192, 3, 16, 16), (192,), (192,),
                                              (192,), (768, 192), (768,), (192, 768), (192,)],
                             BENCHMARKS, inputs=1),
    "volume_block": Model(VolumeBlock, [(1, 16, 16, 32, 32), (32, 16, 3, 3, 3), (32,), (32,),
                                        (32,), (32,), (32,), (32, 32, 3, 3, 3), (32,)],
                          BENCHMARKS, inputs=1),
    "audio_encoder": Model(AudioEncoder, [(1, 1, 16000), (256, 1, 10), (256,), (256,),
                                          (256, 256, 3), (256, 256, 3), (256, 256, 2)],
                           BENCHMARKS, inputs=1),
    "speech_stem": Model(SpeechStem, [(1, 80, 3000), (384, 80, 3), (384,), (384, 384, 3),
                                      (384,)], BENCHMARKS, inputs=1),
    "lstm_layer": Model(LstmLayer, [(1, 64, 128), (1024, 128), (1024, 256), (1024,), (1024,)],
                        BENCHMARKS, inputs=1, decompose=(torch.ops.aten.lstm.input,)),
    "gru_layer": Model(GruLayer, [(1, 64, 128), (768, 128), (768, 256), (768,), (768,)],
                       BENCHMARKS, inputs=1, decompose=(torch.ops.aten.gru.input,)),
    "t5_attention": Model(lambda: RelativeAttention(4), [(1, 128, 256), (768, 256), (256, 256),
                                                          (32, 4)], BENCHMARKS, inputs=1),
    "alibi_attention": Model(lambda: AlibiAttention(8), [(1, 256, 512), (1536, 512), (1536,),
                                                         (512, 512), (512,)], BENCHMARKS,
                             inputs=1),
    "swin_block": Model(lambda: ShiftedWindowBlock(3), [(1, 56, 56, 96), (96,), (96,), (288, 96),
                                                       (288,), (96, 96), (96,)], BENCHMARKS,
                        inputs=1),
    # a model exported in bfloat16, as models are served
    "mlp_bf16": Model(Mlp, [(128, 512), (1024, 512), (1024,), (512, 1024), (512,)], BENCHMARKS,
                      inputs=1, bf16=True),
    "int8_mlp": Model(Int8Mlp, [(128, 512), (512, 1024), (1024,), (1024, 512), (512,)],
                      BENCHMARKS, inputs=1, int8=(0, 1, 3)),
    "tcn": Model(Tcn, [(1, 32, 1024), (64, 32, 1), (64,), (64, 32, 3), (64,)]
                 + [(64, 64, 3), (64,)] * 7, BENCHMARKS, inputs=1),
    "embedding_tower": Model(EmbeddingTower, [(32, 8), (10000, 64), (256, 64), (256,), (1, 256),
                                              (1,)], BENCHMARKS, inputs=1, ids=10000),
}


if __name__ == "__main__":
    import sys
    names = sys.argv[1:]  # the models named, or all of them and the files below
    for name in names or MODELS:
        print(f"wrote {MODELS[name].export(name)}")
    if not names:
        export_language_model(HERE / "tiny_lm_torch.mlir")
        export_indexed_inputs(HERE / "indexed_inputs_torch.mlir")
        print(f"wrote {HERE / 'tiny_lm_torch.mlir'} with its .irpa and .npy files")
