"""Exports the small torch models of tests/data with iree-turbine, as users' models arrive:
`torch` dialect MLIR with the weights as function arguments.

torch and iree-turbine are not dependencies of this project. To rerun, in a separate virtualenv:
    python -m venv /tmp/turbine && /tmp/turbine/bin/pip install torch==2.13.0 iree-turbine==3.9.0
    /tmp/turbine/bin/python tests/data/export_models.py
It rewrites tests/data/mlp_torch.mlir and tests/data/conv_block_torch.mlir."""
from pathlib import Path

import torch
from iree.turbine import aot

HERE = Path(__file__).parent


class Mlp(torch.nn.Module):
    """Two Linear layers with a ReLU: two matmuls with transposed weights, bias fused."""

    def forward(self, x, w1, b1, w2, b2):
        return torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, w1, b1)), w2, b2)


class ConvBlock(torch.nn.Module):
    """conv, bias, relu, conv (NCHW, batch 1: IREE turns each conv into a linalg.generic)."""

    def forward(self, x, k1, b1, k2):
        y = torch.relu(torch.nn.functional.conv2d(x, k1, b1, padding=1))
        return torch.nn.functional.conv2d(y, k2, padding=1)


def export(model: torch.nn.Module, args: tuple, name: str) -> None:
    exported = aot.export(model, args=args)
    (HERE / name).write_text(str(exported.mlir_module))
    print(f"wrote {HERE / name}")


if __name__ == "__main__":
    export(Mlp(), (torch.rand(64, 256), torch.rand(512, 256), torch.rand(512),
                   torch.rand(256, 512), torch.rand(256)), "mlp_torch.mlir")
    export(ConvBlock(), (torch.rand(1, 16, 32, 32), torch.rand(32, 16, 3, 3), torch.rand(32),
                         torch.rand(32, 32, 3, 3)), "conv_block_torch.mlir")
