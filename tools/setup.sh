#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test Shardflow:
# Debian packages (LLVM/MLIR 22, libonnx, protobuf, OpenMPI, ninja, ccache, gtest,
# clang 14 with libFuzzer for tools/fuzz-smoke.sh, OpenBLAS for the CPU GEMMs)
# and a Python virtual environment in .venv with the verification packages.
# Idempotent: when everything is present it only checks, which takes a second or two.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

debian_packages=(
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  libonnx-dev protobuf-compiler libprotobuf-dev
  libopenmpi-dev openmpi-bin
  cmake ninja-build ccache g++ libgtest-dev
  clang-14 libclang-rt-14-dev
  libopenblas-dev
  python3-venv
)
python_packages=(onnx onnxruntime numpy ml_dtypes pytest safetensors matplotlib)

missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The venv is built from the python3 on PATH (Debian's or another); it is
# recreated only when missing or broken.
venv="$root/.venv"
if ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
  echo "setup: creating Python venv in $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import onnx, onnxruntime, numpy, ml_dtypes, pytest, safetensors, matplotlib' >/dev/null 2>&1; then
  echo "setup: installing Python packages: ${python_packages[*]}"
  "$venv/bin/pip" install -q --disable-pip-version-check "${python_packages[@]}"
fi

# The CUDA target (shard-opt --target cuda: ptxas, libdevice) and shard-run's
# CUDA executor (cuda.h, cublasLt.h, nccl.h) need the CUDA toolkit, which
# Debian does not package; its tests fail without it.
cuda="${CUDA_PATH:-${CUDA_HOME:-/usr/local/cuda}}"
if [ ! -x "$cuda/bin/ptxas" ] || [ ! -f "$cuda/nvvm/libdevice/libdevice.10.bc" ]; then
  echo "setup: warning: no CUDA toolkit in $cuda (bin/ptxas, nvvm/libdevice): the --target cuda" \
       "tests will fail; install CUDA 13 with cuBLASLt and NCCL, or set CUDA_PATH" >&2
fi
