//===- Layout.h - shape arithmetic the devices and kernels share -*- C++ -*-===//
//
// Facts about row-major tensors and rank groups that both devices (CPU
// and CUDA) and both kernel libraries rely on, written once: strides, the
// split of a shape into rows at a dimension, the key that decides which
// collectives share a communicator, and attention's [B, H, S, D] view of a
// 3-D or 4-D operand.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_LAYOUT_H
#define SHARDFLOW_RUNTIME_LAYOUT_H

#include "shardflow/Runtime/Format/Artifact.h"
#include "shardflow/Runtime/Format/NpyIO.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace shardflow::runtime {

/// The tensor `inputs` gives for each input buffer of `art`, as (buffer
/// index, tensor), after checking that every input is given with the dtype
/// and shape it was compiled for and that no name is not an input; throws
/// RuntimeError saying which. Both devices bind their inputs so.
std::vector<std::pair<size_t, const HostTensor *>>
bindInputs(const Artifact &art, const std::map<std::string, HostTensor> &inputs);

/// Row-major strides of `shape`, in elements.
std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape);

/// `shape` as rows: outer = prod(shape[:dim]) rows of
/// inner = prod(shape[dim:]) * elem bytes.
std::pair<int64_t, size_t> splitAt(const std::vector<int64_t> &shape, int64_t dim, size_t elem);

/// The strides (in elements) at which the result of broadcasting `in` to
/// `out` (numpy rules, right-aligned) reads `in`: 0 along broadcast
/// dimensions. Returns the first dimension of `in` that does not broadcast,
/// or -1 when all do (`strides` is then filled).
int64_t broadcastStrides(const std::vector<int64_t> &in, const std::vector<int64_t> &out,
                         std::vector<int64_t> &strides);

/// Which communicator a collective runs on: its group size, then its flat
/// rank groups (empty for none). The size is part of the key because
/// [[0,2],[1,3]] and [[0,2,1,3]] flatten alike.
std::vector<int64_t> collectiveGroupKey(const Instruction &inst);

/// An attention operand as [batch, heads, seq, dim] with element strides
/// (sb, sh, ss; dim is contiguous): 4-D [B, H, S, D] as it is, or 3-D
/// [B, S, H*D] split into `numHeads` heads.
struct AttentionHeads {
  int64_t batch = 0, heads = 0, seq = 0, dim = 0;
  int64_t sb = 0, sh = 0, ss = 0;
};

/// Fills `heads` from `shape`; returns "" or what is wrong, naming the
/// operand (`what`: "query", "key", ...).
std::string attentionHeads(const std::vector<int64_t> &shape, int64_t numHeads,
                           const char *what, AttentionHeads &heads);

/// Query, key, value and result of an attention as heads (the result has
/// the query's layout with the value's head size).
struct AttentionLayout {
  AttentionHeads q, k, v, y;
};

/// Checks the four shapes against each other (all 3-D or all 4-D, batch,
/// head size and grouped-query heads agree, the result's element count);
/// returns "" or the problem, naming the shapes.
std::string attentionLayout(const std::vector<int64_t> &query, const std::vector<int64_t> &key,
                            const std::vector<int64_t> &value,
                            const std::vector<int64_t> &result, int64_t qHeads,
                            int64_t kvHeads, AttentionLayout &layout);

/// A collective's dimension parameter `name` (dim, split_dim, concat_dim),
/// checked against a tensor of rank `rank`; throws RuntimeError otherwise.
int64_t collectiveDim(const Instruction &inst, const char *name, size_t rank);

/// collective_permute's `pairs` (source, target, ...): the rank `rank`
/// sends to and the rank it receives from, -1 for none.
std::pair<int, int> permutePeers(const Instruction &inst, int rank);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_LAYOUT_H
