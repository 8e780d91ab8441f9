"""Exports the small torch models of tests/data with iree-turbine, as users' models arrive:
`torch` dialect MLIR with the weights as function arguments.

torch and iree-turbine are not dependencies of this project. To rerun, in a separate virtualenv:
    python -m venv /tmp/turbine && /tmp/turbine/bin/pip install torch==2.13.0 iree-turbine==3.9.0
    /tmp/turbine/bin/python tests/data/export_models.py
It rewrites the *_torch.mlir files of tests/data (the tests' models) and benchmarks/data (the
models of benchmarks/bench_model.py)."""
from pathlib import Path

import torch
from iree.turbine import aot

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
    """A pre-norm transformer encoder block: layernorm, self-attention (4 heads, SDPA), residual,
    layernorm, GELU feed-forward (4x), residual."""

    heads = 4

    def forward(self, x, ln1_w, ln1_b, wqkv, bqkv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2):
        f = torch.nn.functional
        batch, seq, dim = x.shape
        h = f.layer_norm(x, (dim,), ln1_w, ln1_b)
        q, k, v = f.linear(h, wqkv, bqkv).split(dim, dim=-1)
        q, k, v = (t.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        attention = f.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, seq, dim)
        x = x + f.linear(attention, wo, bo)
        h = f.layer_norm(x, (dim,), ln2_w, ln2_b)
        return x + f.linear(f.gelu(f.linear(h, w1, b1)), w2, b2)


class BasicBlock(torch.nn.Module):
    """ResNet's basic block for inference, batch norms folded into the conv biases (as deployed
    models are exported): conv3x3, relu, conv3x3, residual add, relu."""

    def forward(self, x, k1, b1, k2, b2):
        f = torch.nn.functional
        y = torch.relu(f.conv2d(x, k1, b1, padding=1))
        return torch.relu(f.conv2d(y, k2, b2, padding=1) + x)


def export(model: torch.nn.Module, args: tuple, path: Path) -> None:
    exported = aot.export(model, args=args)
    path.write_text(str(exported.mlir_module))
    print(f"wrote {path}")


if __name__ == "__main__":
    r = torch.rand
    export(Mlp(), (r(64, 256), r(512, 256), r(512), r(256, 512), r(256)), HERE / "mlp_torch.mlir")
    # Batch 1: IREE 3.13 drops any config on these convs (they are listed, not tuned); batch 2:
    # tunable.
    for batch, name in ((1, "conv_block_torch.mlir"), (2, "conv_block_batch2_torch.mlir")):
        export(ConvBlock(), (r(batch, 16, 32, 32), r(32, 16, 3, 3), r(32), r(32, 32, 3, 3)),
               HERE / name)
    d, s, ff = 256, 128, 1024
    export(EncoderBlock(), (r(1, s, d), r(d), r(d), r(3 * d, d), r(3 * d), r(d, d), r(d), r(d),
                            r(d), r(ff, d), r(ff), r(d, ff), r(d)),
           BENCHMARKS / "encoder_block_torch.mlir")
    c = 64
    export(BasicBlock(), (r(2, c, 28, 28), r(c, c, 3, 3), r(c), r(c, c, 3, 3), r(c)),
           BENCHMARKS / "basic_block_torch.mlir")
