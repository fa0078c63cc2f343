# shellcheck shell=bash
# Finds the NCCL and cuBLASLt that shard-run needs on a GPU machine, for
# tools/gpu-check.sh and tools/gpu-session.sh (source it; it changes only
# the variables below).
#
#   source tools/cuda-env.sh [PYTHON]
#
# A machine may have them in the CUDA toolkit (or /usr), or only inside
# PyTorch's pip packages (nvidia-nccl-cu13, nvidia-cublas: headers and
# libraries under site-packages/nvidia/). The toolkit's are preferred; the
# pip packages' are used for what the toolkit lacks. Sets:
#
#   SHARDFLOW_CUDA_CMAKE_ARGS  an array of -D options naming the cublasLt.h
#                              and nccl.h folders, for cmake (empty when
#                              the toolkit has both)
#   LD_LIBRARY_PATH            the pip packages' lib folders added, when
#                              the headers come from there or the loader
#                              would not find the library otherwise
#
# and prints one line per library saying where it was found. The search
# roots can be replaced, for tests: SHARDFLOW_CUDA_PREFIXES (toolkit
# prefixes, space-separated; default $CUDA_PATH $CUDA_HOME /usr/local/cuda
# /opt/cuda /usr) and SHARDFLOW_PIP_NVIDIA (folders holding the pip
# packages' trees; default site-packages/nvidia of PYTHON).

_sf_python="${1:-${PYTHON:-python3}}"
SHARDFLOW_CUDA_CMAKE_ARGS=()

_sf_prefixes="${SHARDFLOW_CUDA_PREFIXES-${CUDA_PATH:-} ${CUDA_HOME:-} /usr/local/cuda /opt/cuda /usr}"
if [ -n "${SHARDFLOW_PIP_NVIDIA+set}" ]; then
  _sf_pip="$SHARDFLOW_PIP_NVIDIA"
else
  _sf_pip="$("$_sf_python" -c 'import sysconfig, os
for key in ("purelib", "platlib"):
    d = os.path.join(sysconfig.get_paths()[key], "nvidia")
    if os.path.isdir(d):
        print(d)' 2>/dev/null | sort -u | tr '\n' ' ')"
fi

# The loader finds LIB: in LD_LIBRARY_PATH or the ldconfig cache.
_sf_loadable() {
  local d ldpath="${LD_LIBRARY_PATH:-}"
  for d in ${ldpath//:/ }; do [ -e "$d/$1" ] && return 0; done
  command -v ldconfig >/dev/null && ldconfig -p 2>/dev/null | grep -q "[[:space:]]$1 "
}

# The first file NAME under the pip trees (up to 4 levels down), or nothing.
_sf_pip_find() {
  local root
  for root in $_sf_pip; do
    [ -d "$root" ] || continue
    find "$root" -maxdepth 4 -name "$1" -print -quit 2>/dev/null | grep . && return 0
  done
  return 1
}

# header library cmake-variable what
_sf_locate() {
  local header="$1" lib="$2" var="$3" what="$4" p d inc="" libdir="" found
  for p in $_sf_prefixes; do
    if [ -e "$p/include/$header" ]; then inc="$p/include"; break; fi
  done
  if [ -n "$inc" ]; then
    if _sf_loadable "$lib"; then
      echo "cuda-env: $what: $inc/$header, $lib from the loader's path"
      return 0
    fi
    for p in $_sf_prefixes; do
      for d in lib64 lib targets/x86_64-linux/lib targets/sbsa-linux/lib lib/x86_64-linux-gnu; do
        if [ -e "$p/$d/$lib" ]; then libdir="$p/$d"; break 2; fi
      done
    done
  else
    found="$(_sf_pip_find "$header")" || {
      echo "cuda-env: $what: no $header in $_sf_prefixes${_sf_pip:+ or $_sf_pip}"
      return 1
    }
    inc="$(dirname "$found")"
    SHARDFLOW_CUDA_CMAKE_ARGS+=("-D$var=$inc")
    # The library of the same package as the header.
    p="$(dirname "$inc")"
    for d in lib lib64; do
      if [ -e "$p/$d/$lib" ]; then libdir="$p/$d"; break; fi
    done
  fi
  if [ -z "$libdir" ] && ! _sf_loadable "$lib"; then
    found="$(_sf_pip_find "$lib")" && libdir="$(dirname "$found")"
  fi
  if [ -n "$libdir" ]; then
    case ":${LD_LIBRARY_PATH:-}:" in
      *":$libdir:"*) ;;
      *) export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
    esac
    echo "cuda-env: $what: $inc/$header, $libdir/$lib (added to LD_LIBRARY_PATH)"
  elif _sf_loadable "$lib"; then
    echo "cuda-env: $what: $inc/$header, $lib from the loader's path"
  else
    echo "cuda-env: $what: $inc/$header, but no $lib anywhere: CUDA artifacts will fail to load it"
  fi
}

_sf_locate cublasLt.h libcublasLt.so.13 SHARDFLOW_CUBLASLT_INCLUDE_DIR cuBLASLt
_sf_locate nccl.h libnccl.so.2 SHARDFLOW_NCCL_INCLUDE_DIR NCCL
unset -f _sf_loadable _sf_pip_find _sf_locate
unset _sf_python _sf_prefixes _sf_pip
