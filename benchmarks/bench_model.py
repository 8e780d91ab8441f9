#!/usr/bin/env python3
"""autotune.py --model on models exported from PyTorch with iree-turbine (tests/data/
export_models.py), with PyTorch eager beside the verdict: what the user would run instead. The
classes users bring: transformer layers (encoder, causal, LLaMA-style), LLM decode steps against
a KV cache (GPT-2's, and LLaMA's of grouped KV heads), ResNet stages, a MobileNet
depthwise-separable block, a ResNeXt grouped-conv bottleneck, a CNN classifier (batch norm,
global average pool), an MLP, a small MLP head, a diffusion UNet residual block (GroupNorm), a
vision transformer's patch embedding, a recommender tower (token ids into an embedding table),
a speech feature encoder (Conv1d), a speech recognizer's stem (Whisper's padded Conv1d
over mel frames), recurrent layers (LSTM, GRU), T5's attention (a relative-position bias
computed in the graph), a Swin transformer's shifted-window attention (torch.roll, many small
windows) and a 3-D UNet block (Conv3d). They read
their weights from a parameter archive, as deployed models do (an .irpa of random weights is
written for each, and PyTorch is given the same ones); the encoder block also comes with its
weights as function arguments, the other way models are exported, to show what that costs.

For each model it runs the whole loop as a user would (search IREE's module flags, rank the
dispatches under the best, tune the hot ones inside the model, write flags and one spec, check
them together, verify and time the model), then times the whole
call of IREE's default, IREE's data tiling, the tuned model and, when torch and iree-turbine are
importable (`pip install -e ".[torch]"`), PyTorch eager on the same module and the same inputs
(torch threads = physical cores, as IREE's local-task), all in one interleaved session: times
with 95% intervals, and the tuned model against each. The tuned model and PyTorch are also
timed under SCHED_BATCH (iree/process.py: IREE's wait spins on a worker it can preempt), the
tuned model with local-task's workers unpinned (a runtime flag, autotune.py's other way to the
same end) and on local-sync too where its answer runs there (and PyTorch then on one thread), and
each side is compared at its better scheduling. Each sample of either is the mean ms per
call over the sample's consecutive calls (IREE: iree-benchmark-module's loop; PyTorch: a Python
loop), slow calls included, as a serving loop sees them."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd

from common import ROOT, lines_as_printed, write_parameters

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.library import LOCAL_SYNC, LOCAL_TASK
from iree_dispatch_profiler.iree import iree_jobs, modules, process
from iree_dispatch_profiler.iree.launchers import run_module
from iree_dispatch_profiler.iree.timing import Benchmark, INVOCATION
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.measure.blas import timed_calls
from iree_dispatch_profiler.measure.protocol import Candidate, Protocol, measure
from iree_dispatch_profiler.measure.verification import agreement
from iree_dispatch_profiler.tuning.model import final
from iree_dispatch_profiler.tuning.paths import TuningPaths

MODELS = {  # the models of export_models.MODELS that live in benchmarks/data, and what each is
    "bert_layer": "BERT-base encoder layer: seq 128, d 768, 12 heads, FFN 3072, batch 1",
    "encoder_block": "encoder block: seq 128, d 256, 4 heads, FFN 1024, batch 1; weights as "
                     "function arguments",
    "encoder_block_params": "the encoder block, its weights as parameters",
    "encoder_dynamic": "the encoder block, its weights as parameters, exported for any sequence "
                       "length (as language models are served); tuned and timed at 128",
    "causal_block": "LLM-style causal block: seq 256, d 512, 8 heads, FFN 2048",
    "llama_block": "LLaMA-style block, prefill: seq 128, d 512, 8 heads sharing 2 KV heads, "
                   "RoPE, RMSNorm, SwiGLU FFN 1376",
    "resnet_stage_b1": "ResNet-18 stage entry 64->128, 56x56 -> 28x28, batch 1",
    "resnet_stage_b2": "ResNet-18 stage entry 64->128, 56x56 -> 28x28, batch 2",
    "mlp_1024": "MLP: 64 x 512 -> 1024 -> 512, ReLU",
    "mlp_head": "MLP classifier head: 1 x 256 -> 256 -> 10, ReLU (dispatches of a few "
                "microseconds)",
    "mobilenet_block": "MobileNetV2 inverted residual: 24 -> 144 -> 24 channels, 3x3 depthwise, "
                       "56x56, batch 1",
    "convnext_block": "ConvNeXt block: 7x7 depthwise 96 channels, 56x56, permuted to "
                      "channels-last, LayerNorm, GELU MLP 96->384->96, layer scale, batch 1",
    "resnext_block": "ResNeXt bottleneck: 256 -> 256 (32 groups of 8, 3x3) -> 256 channels, "
                     "28x28, batch 1",
    "cnn_classifier": "CNN classifier: 128x128 RGB, conv 3->32 stride 2, batch norm, max pool, "
                      "conv 32->128, global average pool, 1000 classes",
    "gpt2_decode": "GPT-2 small decode step: one token against a 511-token KV cache, d 768, "
                   "12 heads, FFN 3072",
    "llama_decode": "LLaMA-style decode step: one token against a 511-token KV cache of 2 KV "
                    "heads shared by 8 query heads, d 512, RoPE, SwiGLU FFN 1376",
    "unet_resblock": "diffusion UNet residual block: GroupNorm(32), SiLU, 3x3 conv 128->128, "
                     "twice, 32x32, batch 1",
    "unet_up": "segmentation UNet decoder step: ConvTranspose2d 128->64 2x2 stride 2, 32x32 -> "
               "64x64, the skip joined, 3x3 conv 128->64 and 64->64, ReLU, batch 1",
    "vit_patch_embed": "vision transformer stem: 224x224 RGB in 16x16 patches (196 tokens of "
                       "192), LayerNorm, GELU MLP 192->768->192",
    "mlp_bf16": "MLP exported in bfloat16 (weights, activations and output): 128 tokens x "
                "512 -> 1024 -> 512, ReLU",
    "int8_mlp": "hand-quantized (W8A8) MLP: 128 tokens x 512 -> 1024 -> 512, int8 activations "
                "and weights multiplied as int32 (CPU PyTorch has no int8 matmul), a scale per "
                "channel, ReLU, requantized to int8",
    "embedding_tower": "recommender tower: 32 x 8 token ids into a 10000 x 64 embedding table, "
                       "mean pool, MLP 64->256->1",
    "volume_block": "3-D UNet double conv: 16 -> 32 -> 32 channels, 3x3x3, 16x32x32 volume, "
                    "batch norm, ReLU, batch 1",
    "audio_encoder": "speech feature encoder: 1 s of 16 kHz audio, strided Conv1d 1->256 (k 10), "
                     "GroupNorm, then 256->256 (k 3, 3, 2), GELU",
    "speech_stem": "speech recognizer stem (Whisper tiny's): 80 mel bins x 3000 frames, Conv1d "
                   "80->384 (k 3, padding 1), GELU, Conv1d 384->384 (k 3, stride 2, padding 1), "
                   "GELU",
    "tcn": "temporal convolutional network: 32 channels x 1024 steps, 1x1 conv to 64, 4 residual "
           "blocks of two dilated causal Conv1d 64->64 (k 3, dilation 1, 2, 4, 8; padded, the "
           "future chomped off), ReLU",
    "lstm_layer": "one-layer LSTM (PyTorch's fused aten.lstm): 64 steps, 128 inputs, 256 "
                  "hidden, batch 1; exported decomposed, a matrix-vector product and the gates "
                  "per step",
    "gru_layer": "one-layer GRU (aten.gru): 64 steps, 128 inputs, 256 hidden, batch 1; exported "
                 "decomposed as the LSTM",
    "t5_attention": "T5 self-attention: seq 128, d 256, 4 heads, no scaling, a learned bias per "
                    "head by relative-position bucket (integer ops, a log, a lookup)",
    "alibi_attention": "causal self-attention with ALiBi (BLOOM's, MPT's): seq 256, d 512, 8 "
                       "heads, each head's slope times the key's distance added to the scores, "
                       "computed in the graph",
    "swin_block": "Swin shifted-window attention: 56x56x96 channels last, LayerNorm, torch.roll, "
                  "7x7 windows (64 windows x 3 heads of 49 tokens), residual",
}
# --inputs of a model exported with dynamic sizes: the sizes it is tuned and timed at
INPUTS = {"encoder_dynamic": "1x128x256xf32"}
SHOWN_DISPATCHES = 6
SUMMARY_PREFIXES = ("  rewrite ", "Source: ", "  flags ", "Flags: ", "Trials by expected gain",
                    "  target ", "Tuning spec ", "No tuned config", "dropped from the spec", "Outputs: ",
                    "Model: ", "Model times", "IREE data tiling + ukernels does not", "target ",
                    "Answer: ")
TIME_GOES = "Where the answer's call goes"
TUNED = "tuned (flags + spec)"
BUILDS = {"IREE default": "default.vmfb", "IREE data tiling": "model_data_tiling.vmfb",
          TUNED: "model_tuned.vmfb"}
TORCH = "PyTorch eager"
# Each side also under SCHED_BATCH (process.BATCH says why IREE's call can gain), and compared
# at its better policy: like the BLAS anchor, PyTorch at its best too.
BATCHED = " | SCHED_BATCH"
# the tuned model on local-sync too where the answer's run command names it (autotune.py
# found its dispatches too small to repay IREE's worker threads), and PyTorch on one thread
SYNCED = " | local-sync"
ONE_THREAD = " | 1 thread"
# the answer with local-task's workers unpinned (final.unpinned_workers), as autotune.py times it
UNPINNED = " | unpinned"
GOAL = 1.25  # issue 30's goal: the tuned model 1.25x faster than PyTorch eager
# ... and 2x faster than IREE's default, where the default is at least that far from the floor
OVER_DEFAULT = 2.0


def torch_allocator_at_its_best() -> str:
    """PyTorch eager at its best whatever ran before it in this process. glibc serves each
    allocation of 128 KiB or more with a fresh mmap until a freed large block raises that
    threshold (to 32 MiB at most): in a new process a MobileNet block's 1.8 MB intermediates
    cost about 1,700 page faults a call (3.9 ms against 0.90 ms once a BERT layer had run).
    PyTorch gets the heap IREE's timed tools get (iree_jobs.KEPT_HEAP), set here with mallopt."""
    if not iree_jobs.keep_this_heap():
        return ("PyTorch eager: the C library's malloc is not glibc's; its time may depend on "
                "what ran before it")
    return ("PyTorch eager: glibc malloc keeps what it frees (mallopt M_MMAP_THRESHOLD and "
            "M_TRIM_THRESHOLD 2 GiB, as IREE's timed tools get them): no page faults per call")


def torch_eager(name: str, inputs: list[np.ndarray], weights: dict[str, np.ndarray]):
    """The model's PyTorch module, given `weights` as its parameters, called on `inputs`; None
    without torch and iree-turbine."""
    if not all(importlib.util.find_spec(m) for m in ("torch", "iree.turbine")):
        return None
    import torch
    sys.path.insert(0, str(ROOT / "tests" / "data"))
    from export_models import MODELS as TORCH_MODELS

    def tensor(array: np.ndarray):
        """torch takes no ml_dtypes array: a bfloat16 one goes over as its bits."""
        if array.dtype == ml_dtypes.bfloat16:
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(array)

    torch.set_num_threads(iree_jobs.physical_cores())
    module, tensors = TORCH_MODELS[name].module(), [tensor(a) for a in inputs]
    if weights:
        module.load_state_dict({k: tensor(v) for k, v in weights.items()})

    def call():
        with torch.inference_mode():
            return module(*tensors)
    return call


TORCH_BEST = "PyTorch eager at its better scheduling"


def answer_of(labels) -> str:
    """The answer's label among `labels`: the tuned build, or IREE's default without one."""
    return TUNED if TUNED in labels else "IREE default"


def better(outcomes: dict, label: str) -> str:
    """`label`, `label` under SCHED_BATCH or on one thread (local-sync), whichever has the
    lowest median (a failed one never)."""
    timed = [n for n in (label, label + BATCHED, label + UNPINNED, label + SYNCED,
                         label + ONE_THREAD)
             if n in outcomes and not outcomes[n].reason]
    return min(timed, key=lambda n: outcomes[n].runtime.median) if timed else label


def threads_scheduled(policy: int) -> None:
    """Every thread of this process (PyTorch's pool too) under the scheduling `policy`."""
    for thread in os.listdir("/proc/self/task"):
        os.sched_setscheduler(int(thread), policy, os.sched_param(0))


def under_batch(sample):
    """`sample` (seconds -> ms) taken with this process's threads under SCHED_BATCH."""
    def batched(seconds: float):
        threads_scheduled(os.SCHED_BATCH)
        try:
            return sample(seconds)
        finally:
            threads_scheduled(os.SCHED_OTHER)
    return batched


def one_thread(sample):
    """`sample` taken with PyTorch on one thread (as IREE's local-sync)."""
    def single(seconds: float):
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return sample(seconds)
        finally:
            torch.set_num_threads(threads)
    return single


def time_goes(lines: list[str]) -> list[str]:
    """autotune.py's block on where the answer's call goes: its slowest dispatches at their
    GFLOP/s against the session's compute ceiling, and the call's time beyond them."""
    for i, line in enumerate(lines):
        if line.startswith(TIME_GOES):
            block = [line]
            for more in lines[i + 1:]:
                if not more.startswith("  "):
                    break
                block.append(more)
            return block
    return []


def beyond_reach(floor: dict, torch_ms: float) -> str:
    """How far tuning could take the model past PyTorch: its contractions at this session's
    compute ceiling (autotune.py's floor) against PyTorch's best call. Where 1.25x faster
    needs the whole call near 100% of the ceiling, the goal is the machine's, not the tuner's."""
    return (f"compute floor {floor['ms']:.3f} ms ({floor['gflop']:.3g} GFLOP of contractions "
            f"at {floor['at']}): PyTorch eager's call at "
            f"{floor['ms'] / torch_ms:.0%} of the ceiling; {GOAL}x faster than it needs the call "
            f"at {floor['ms'] * GOAL / torch_ms:.0%}")


def goals_missed(name: str, over_torch, over_default, outcomes: dict, floor: dict | None
                 ) -> list[str]:
    """The goals of issue 30 a model's row misses, by its medians: GOAL x PyTorch eager's speed,
    and OVER_DEFAULT x IREE default's where the default's call is at least that far above the
    compute floor (a model whose default is near its floor cannot gain that much)."""
    def short(ratio, goal: float) -> bool:
        # by the median as the table prints it (two decimals): a row shown at 1.25x meets 1.25x
        return ratio is not None and round(ratio.median, 2) < goal
    missed = []
    if short(over_torch, GOAL):
        missed.append(f"{name} {over_torch.median:.2f}x PyTorch eager's speed (goal {GOAL}x)")
    default = outcomes.get("IREE default")
    leaves = (default.runtime.median / floor["ms"] if floor and default is not None
              and not default.reason else 0.0)
    if leaves >= OVER_DEFAULT and short(over_default, OVER_DEFAULT):
        missed.append(f"{name} {over_default.median:.2f}x IREE default's speed (goal "
                      f"{OVER_DEFAULT}x; the default is {leaves:.1f}x its floor)")
    return missed


def side_by_side(name: str, work: Path, seconds: float, parameters: list[str],
                 weights: dict[str, np.ndarray], sync: bool = False) -> dict:
    """One interleaved session of the whole call: IREE's builds (the tuned one when flags or a
    spec won) and PyTorch eager, on the same weights; the answer (the tuned build, or IREE's
    default without one) also under SCHED_BATCH, and with `sync` on local-sync."""
    lowered = work / "model_input.mlir"
    signature = modules.find_function(lowered, None)
    paths = sorted(work.glob("main_input*.npy"), key=lambda p: int(p.stem.split("input")[1]))
    inputs = [np.array(modules.load_input(p, i, argument, signature.name))
              for i, (p, argument) in enumerate(zip(paths, signature.arguments))]
    tools = IreeTools.locate()
    candidates, notes = [], []
    batch = process.can_schedule(process.BATCH)
    answer = answer_of([label for label, file in BUILDS.items() if (work / file).is_file()])
    for label, file in BUILDS.items():
        ways = [("", LOCAL_TASK, "", ())]
        if label == answer:
            ways += [(BATCHED, LOCAL_TASK, process.BATCH, ())] if batch else []
            ways += [(UNPINNED, LOCAL_TASK, "", final.unpinned_workers())]
            ways += [(SYNCED, LOCAL_SYNC, "", ())] if sync else []
        for suffix, device, policy, flags in ways:
            if (work / file).is_file():
                bench = Benchmark(tools, work / file, signature.name, device,
                                  [f"@{p}" for p in paths], flags=[*parameters, *flags],
                                  timeout=600, source=INVOCATION, scheduling=policy)
                candidates.append(Candidate(label + suffix, bench.sample))
    call = torch_eager(name, inputs, weights)
    if call is not None:
        import torch
        expected = call()
        expected = [t.float().numpy().astype(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16
                    else t.numpy() for t in (expected if isinstance(expected, tuple) else (expected,))]
        outputs = modules.output_paths(work, "bench_default_output", signature)
        ran = run_module(tools, work / BUILDS["IREE default"], signature.name, "local-task",
                         [f"@{p}" for p in paths], outputs, 600, parameters)
        if ran.ok:
            for i, (got, wanted) in enumerate(zip(modules.read_outputs(outputs, signature),
                                                  expected)):
                check = agreement(got, wanted)
                notes.append(f"output {i}: PyTorch eager against IREE default "
                             f"{'agree' if check.ok else 'DISAGREE'} ({check.detail})")
        call()  # warm: the first call allocates
        # like with like: iree-benchmark-module's sample is the mean of its calls, a slow call
        # included (IREE's calls here have the longer tail: a median would flatter PyTorch)
        candidates.append(Candidate(TORCH, lambda s: timed_calls(call, s, statistics.fmean)))
        if batch:
            candidates.append(Candidate(TORCH + BATCHED, under_batch(
                lambda s: timed_calls(call, s, statistics.fmean))))
        if sync:  # IREE on one thread: PyTorch may take one too
            candidates.append(Candidate(TORCH + ONE_THREAD, one_thread(
                lambda s: timed_calls(call, s, statistics.fmean))))
        notes.append(f"(torch {torch.__version__}, {torch.get_num_threads()} threads)")
    measured = measure(candidates, "IREE default", Protocol(time_budget=seconds))
    return {"outcomes": measured.outcomes, "notes": notes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n-trial", type=int, default=12, help="trials per hot target")
    parser.add_argument("--confirm-seconds", type=float, default=10.0,
                        help="interleaved timing of the leaders, and of the whole model")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: "
                        + ", ".join(MODELS))
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args()
    lines_as_printed()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_model_"))
    work.mkdir(parents=True, exist_ok=True)
    if importlib.util.find_spec("torch") is None:
        print("torch is not importable here: PyTorch eager is left out (pip install -e \".[torch]\")")
    else:
        print(torch_allocator_at_its_best())
    summary = []
    for name in args.models.split(","):
        if name not in MODELS:
            sys.exit(f"bench_model.py: unknown model {name!r} (choose from {', '.join(MODELS)})")
        output = work / f"{name}.csv"
        paths = TuningPaths(output)
        source = ROOT / "benchmarks" / "data" / f"{name}_torch.mlir"
        scope, weights = write_parameters(source, work / f"{name}.irpa")
        parameters = [f"--parameters={scope}={work / f'{name}.irpa'}"] if weights else []
        command = [sys.executable, str(ROOT / "autotune.py"), "--input", str(source), "--model",
                   "--output", str(output), "--n-trial", str(args.n_trial),
                   "--confirm-seconds", str(args.confirm_seconds), "--store=off", *parameters,
                   *([f"--inputs={INPUTS[name]}"] if name in INPUTS else [])]
        start = time.perf_counter()
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        lines = result.stdout.splitlines()
        if result.returncode not in (0, 1) or not any(line.startswith("Model: ") for line in lines):
            sys.exit(f"autotune.py --model failed on {name} (exit {result.returncode}):\n"
                     + result.stderr[-2000:])
        if not summary:
            print(lines[0].split(", for ", 1)[-1])  # the CPU the figures are for
        print(f"\n== {name}: {MODELS[name]}")
        print(f"tuning wall time {seconds:.0f} s (autotune.py --model --n-trial {args.n_trial}), "
              f"exit {result.returncode}")
        ranking = pd.read_csv(paths.ranking, keep_default_na=False)
        print(f"dispatch ranking (of {len(ranking)}; under the chosen flags):")
        for row in ranking.head(SHOWN_DISPATCHES).itertuples():
            target = (f"target {row.target}{' (hot)' if row.hot == 'yes' else ''}"
                      if row.target != "" else f"not tunable: {row.not_tunable}")
            print(f"  {row.rank:>2} {row.share:>6.1%} {row.ms:>9.3f} ms  {row.dispatch}  "
                  f"{row.root} {row.shape}  [{target}]")
        print("\n".join(line for line in lines if line.startswith(SUMMARY_PREFIXES)
                        or line.startswith("  answer:")))
        print("\n".join(time_goes(lines)))
        # local-sync where the answer's run command names it: the script's, or IREE's
        # default's when nothing is shipped ("Answer: IREE's default, run with `...`")
        script = paths.compile_script
        sync = ((script.is_file() and f"--device={LOCAL_SYNC}" in script.read_text())
                or any(line.startswith("Answer: ") and f"--device={LOCAL_SYNC}" in line
                       for line in lines))
        session = side_by_side(name, paths.work, args.confirm_seconds, parameters, weights, sync)
        outcomes = session["outcomes"]
        print("whole model call, one interleaved session (median of samples, each the mean ms per call [95%]):")
        for label, outcome in outcomes.items():
            shown = (f"{outcome.runtime.median:9.3f} {outcome.runtime.interval('.3f')}"
                     if not outcome.reason else f"failed: {outcome.reason}")
            print(f"  {label:<34} {shown}")
        best = better(outcomes, answer_of(outcomes))
        torch_best = better(outcomes, TORCH)
        verdicts = {}
        for other in ("IREE default", "IREE data tiling", TORCH, TORCH + BATCHED,
                      TORCH + ONE_THREAD):
            if other in outcomes and other != best and not outcomes[other].reason:
                ratio = stats.speedup(outcomes[other].samples, outcomes[best].samples)
                verdicts[other] = ratio
                print(f"  {best} against {other}: {stats.direction(ratio)}")
        if torch_best in verdicts:
            verdicts[TORCH_BEST] = verdicts[torch_best]
            print(f"  each at its better scheduling: {best} against {torch_best}: "
                  f"{stats.direction(verdicts[torch_best])}")
        print("\n".join(f"  {note}" for note in session["notes"]))
        floor = json.loads(paths.model_summary.read_text()).get("floor")
        torch_ms = (outcomes[torch_best].runtime.median if torch_best in outcomes
                    and not outcomes[torch_best].reason else None)
        if floor and torch_ms:
            print("  " + beyond_reach(floor, torch_ms))
        summary.append((name, seconds, outcomes, verdicts, floor, torch_ms))
    print("\n== summary: whole call, median ms; the tuned model (or IREE's default, without a "
          "spec) against PyTorch eager (95%), each at its better scheduling (| batch: under "
          "SCHED_BATCH; | unpinned: local-task's workers unpinned)")
    synced = any(answer_of(row[2]) + SYNCED in row[2] for row in summary)
    columns = [*BUILDS, TUNED + BATCHED, TUNED + UNPINNED, *([TUNED + SYNCED] if synced else []),
               TORCH, TORCH + BATCHED, *([TORCH + ONE_THREAD] if synced else [])]
    shown = {TUNED: "tuned", TUNED + BATCHED: "tuned | batch", TUNED + UNPINNED: "tuned | unpinned",
             TUNED + SYNCED: "tuned | sync", TORCH + BATCHED: "PyTorch | batch",
             TORCH + ONE_THREAD: "PyTorch | 1 thread"}
    header = (f"{'model':<20} {'tuning':>7} "
              + " ".join(f"{shown.get(label, label):>16}" for label in columns)
              + f" {'floor':>7} {'PyTorch':>7} {f'{GOAL}x':>7} {'tuned vs IREE default':>22}"
              + "   tuned vs PyTorch")
    print(header)
    short = []
    for name, seconds, outcomes, verdicts, floor, torch_ms in summary:
        # the answer's columns: the tuned model's, or IREE's default's without a spec
        shown_as = {TUNED + way: answer_of(outcomes) + way for way in (BATCHED, UNPINNED, SYNCED)}
        timed = {label: outcomes.get(shown_as.get(label, label)) for label in columns}
        cells = [f"{o.runtime.median:16.3f}" if o is not None and not o.reason else f"{'-':>16}"
                 for o in timed.values()]
        against = stats.direction(verdicts[TORCH_BEST]) if TORCH_BEST in verdicts else "-"
        reach = ([f"{floor['ms']:7.3f}", f"{floor['ms'] / torch_ms:7.0%}",
                  f"{floor['ms'] * GOAL / torch_ms:7.0%}"] if floor and torch_ms
                 else [f"{'-':>7}"] * 3)
        over = verdicts.get("IREE default")
        over_cell = f"{over.median:.2f}x {over.interval('.2f')}" if over is not None else "-"
        print(f"{name:<20} {seconds:>6.0f}s " + " ".join(cells + reach)
              + f" {over_cell:>22}   {against}")
        short += goals_missed(name, verdicts.get(TORCH_BEST), over, outcomes, floor)
    print("(floor: the tuned model's contractions at this session's compute ceiling, ms; "
          f"PyTorch: its better call's share of the ceiling; {GOAL}x: the share the call needs "
          f"to be {GOAL}x faster than PyTorch)")
    print("short of issue 30's goals (medians): " + ("; ".join(short) if short else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
