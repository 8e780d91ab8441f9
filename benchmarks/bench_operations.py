#!/usr/bin/env python3
"""Side by side on llvm-cpu: batch_matmul shapes from mmperf, a BERT-base attention and SDXL UNet
convolutions (channels scaled down so the run takes minutes on 2 cores): IREE default vs best
configuration vs numpy."""
from __future__ import annotations


from common import compile_and_profile, parse_args, print_table, script

# mmperf's batch_matmul rows (BERT-style attention), b x m x n x k.
BATCH_MATMULS = [(12, 128, 128, 32), (12, 128, 32, 128), (16, 512, 512, 64)]
# A BERT-base layer's attention at sequence 128 (12 heads of 64): b x m x k1 x k2 x n.
ATTENTIONS = [(12, 128, 64, 128, 64)]
# SDXL UNet convs (sdxl_unet_conv2d_shapes.csv), channels divided by CHANNEL_SCALE:
# (n, h, w, c, f, k, stride, padding): the 10x-repeated 32x32 3x3 1280->1280 conv, a 1x1
# 640->1280 projection, and the strided 64x64 640->640 downsampling conv.
CHANNEL_SCALE = 4
SDXL_CONVS = [(2, 32, 32, 1280, 1280, 3, 1, 1), (2, 32, 32, 640, 1280, 1, 1, 0),
              (2, 64, 64, 640, 640, 3, 2, 1)]


def main() -> None:
    args, work = parse_args(__doc__)
    for b, m, n, k in BATCH_MATMULS:
        script("generator.py", "--generated-dir", work, "--operation-kind=batch_matmul",
               f"--problem-b={b}", f"--problem-m={m}", f"--problem-n={n}", f"--problem-k={k}",
               "--data-types=f32")
    for b, m, k1, k2, n in ATTENTIONS:
        script("generator.py", "--generated-dir", work, "--operation-kind=attention",
               f"--problem-b={b}", f"--problem-m={m}", f"--problem-k1={k1}",
               f"--problem-k2={k2}", f"--problem-n={n}", "--data-types=f32")
    for n, h, w, c, f, k, stride, padding in SDXL_CONVS:
        script("generator.py", "--generated-dir", work, "--operation-kind=conv2d",
               f"--input-n={n}", f"--input-h={h}", f"--input-w={w}", f"--input-c={c // CHANNEL_SCALE}",
               f"--filter-f={f // CHANNEL_SCALE}", f"--filter-h={k}", f"--filter-w={k}",
               f"--stride={stride}", f"--padding={padding}", "--data-types=f32,f16")
    data, serial, parallel = compile_and_profile(work, args.repetitions)
    print_table(data, args.repetitions)
    print(f"compile: -j1 {serial:.1f} s, parallel {parallel:.1f} s, speedup {serial / parallel:.2f}x")


if __name__ == "__main__":
    main()
