"""The runtime's hand-written CUDA kernels, run on the CPU.

tools/cuda-kernel-check runs every device kernel (attention on tensor
cores and SIMT, its backward, strided copies, pad, gather) over its range of shapes and
flags and compares each result with the runtime's CPU kernel. With
--emulate it needs no GPU: the kernels are compiled as host code
(lib/Runtime/Device/CUDA/Kernels/HostEmulation.h), each CUDA thread a fiber, with
mma.sync, ldmatrix and cp.async emulated from the PTX ISA's definitions,
so fragment layouts, tile indexing, the online softmax and the cp.async
pipeline are checked on every build. The same cases run on a GPU in
tools/gpu-session.sh check. With --quick (the default here) the four large
cases (a 1024 x 1024 attention, two 333 x 257 masked ones, a copy of 128M
elements) are left out: about 2.5 minutes on 2 cores; SHARDFLOW_FULL_TESTS=1
runs every case (about 3.5).
"""
import os
import re
import subprocess

import pytest

from shardflow import toolchain


def test_device_kernels_match_the_cpu_kernels_under_emulation():
    try:
        tool = toolchain.tool("cuda-kernel-check")
    except FileNotFoundError:
        pytest.skip("built without the CUDA kernels (no CUDA toolkit headers)")
    quick = [] if os.environ.get("SHARDFLOW_FULL_TESTS") == "1" else ["--quick"]
    out = subprocess.run([str(tool), "--emulate", *quick], capture_output=True, text=True,
                         timeout=1200)
    assert "has no kernel emulation" not in out.stderr, out.stderr
    summary = re.search(r"(\d+) passed, (\d+) failed", out.stdout)
    assert summary, out.stdout[-3000:] + out.stderr
    failures = [line for line in out.stdout.splitlines() if "FAIL" in line]
    assert out.returncode == 0 and summary.group(2) == "0", "\n".join(failures)
    assert ("4 large cases skipped" in out.stdout) == bool(quick), out.stdout[-500:]
    # Every case ran: tensor-core and SIMT attention, and data movement.
    assert int(summary.group(1)) >= 270, out.stdout[-2000:]
    # Each tensor-core kernel with the general score rule (masks, softcaps)
    # and without it (_plain).
    for kernel in ("sf_attention_mma_bf16_d64]", "sf_attention_mma_f16_d128]",
                   "sf_attention_mma2_bf16_d64]", "sf_attention_mma2_f16_d64]",
                   "sf_attention_mma_bf16_d64_plain]", "sf_attention_mma_f16_d128_plain]",
                   "sf_attention_mma2_bf16_d64_plain]", "sf_attention_mma2_f16_d64_plain]",
                   "sf_attention_simt_f32_dv256", "sf_strided_copy_e16_i32", "sf_gather_",
                   "sf_pad_", "sf_attention_grad_dq_f32,sf_attention_grad_dkv_f32]",
                   "sf_attention_grad_dq_bf16,sf_attention_grad_dkv_bf16]"):
        assert kernel in out.stdout, kernel
    # Query, key and value read in one fused buffer (packed_qkv), on both
    # tensor-core kernels.
    assert re.search(r"attn bf16 .* packed +ok .*sf_attention_mma_bf16_d64", out.stdout)
    assert re.search(r"attn bf16 .* packed mma2 +ok .*sf_attention_mma2_bf16_d64", out.stdout)


def test_emulation_refuses_timing():
    try:
        tool = toolchain.tool("cuda-kernel-check")
    except FileNotFoundError:
        pytest.skip("built without the CUDA kernels (no CUDA toolkit headers)")
    # Timings measure a GPU; an emulated run would print meaningless ones.
    out = subprocess.run([str(tool), "--emulate", "--time"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "not with --emulate" in out.stderr, out.stderr
