//===- Layout.cpp - shape arithmetic the devices and kernels share -------===//

#include "shardflow/Runtime/Format/Layout.h"

#include <tuple>

using namespace shardflow::runtime;

std::vector<int64_t> shardflow::runtime::rowMajorStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

std::pair<int64_t, size_t> shardflow::runtime::splitAt(const std::vector<int64_t> &shape,
                                                       int64_t dim, size_t elem) {
  int64_t outer = 1;
  size_t inner = elem;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (int64_t(d) < dim)
      outer *= shape[d];
    else
      inner *= size_t(shape[d]);
  }
  return {outer, inner};
}

int64_t shardflow::runtime::broadcastStrides(const std::vector<int64_t> &in,
                                             const std::vector<int64_t> &out,
                                             std::vector<int64_t> &strides) {
  if (in.size() > out.size())
    return 0;
  std::vector<int64_t> inStrides = rowMajorStrides(in);
  size_t lead = out.size() - in.size();
  strides.assign(out.size(), 0);
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] != out[lead + d] && in[d] != 1)
      return int64_t(d);
    strides[lead + d] = in[d] == 1 ? 0 : inStrides[d];
  }
  return -1;
}

std::vector<int64_t> shardflow::runtime::collectiveGroupKey(const Instruction &inst) {
  std::vector<int64_t> key =
      inst.params.has("groups") ? inst.params.getInts("groups") : std::vector<int64_t>{};
  if (!key.empty())
    key.insert(key.begin(), inst.params.getInt("group_size"));
  return key;
}

std::vector<std::pair<size_t, const HostTensor *>>
shardflow::runtime::bindInputs(const Artifact &art,
                               const std::map<std::string, HostTensor> &inputs) {
  auto listed = [](const std::vector<int64_t> &shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i)
      s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
  };
  std::vector<std::pair<size_t, const HostTensor *>> bound;
  for (size_t i = 0; i < art.buffers.size(); ++i) {
    const BufferDesc &b = art.buffers[i];
    if (b.kind != BufferDesc::Kind::Input)
      continue;
    auto it = inputs.find(b.name);
    if (it == inputs.end())
      throw RuntimeError("input '" + b.name + "' (" + dtypeName(b.dtype) + listed(b.shape) +
                         ") was not given; pass --input " + b.name + "=FILE.npy");
    const HostTensor &t = it->second;
    if (t.dtype != b.dtype || t.shape != b.shape)
      throw RuntimeError("input '" + b.name + "' is " + dtypeName(t.dtype) + listed(t.shape) +
                         " but the model was compiled for " + dtypeName(b.dtype) +
                         listed(b.shape));
    bound.emplace_back(i, &t);
  }
  for (const auto &[name, t] : inputs) {
    bool known = false;
    for (const BufferDesc &b : art.buffers)
      known |= b.kind == BufferDesc::Kind::Input && b.name == name;
    if (!known)
      throw RuntimeError("'" + name + "' is not an input of this model");
  }
  return bound;
}

std::string shardflow::runtime::attentionHeads(const std::vector<int64_t> &shape,
                                               int64_t numHeads, const char *what,
                                               AttentionHeads &h) {
  if (shape.size() == 4) {
    h.batch = shape[0];
    h.heads = shape[1];
    h.seq = shape[2];
    h.dim = shape[3];
    h.ss = h.dim;
    h.sh = h.seq * h.dim;
    h.sb = h.heads * h.sh;
    return "";
  }
  if (shape.size() == 3) {
    if (numHeads <= 0 || shape[2] % numHeads)
      return std::string("3-D ") + what + " needs a head count dividing its hidden size " +
             std::to_string(shape[2]);
    h.batch = shape[0];
    h.heads = numHeads;
    h.seq = shape[1];
    h.dim = shape[2] / numHeads;
    h.sh = h.dim;
    h.ss = shape[2];
    h.sb = h.seq * h.ss;
    return "";
  }
  return std::string(what) + " must be 3-D or 4-D, has shape " + shapeText(shape);
}

std::string shardflow::runtime::attentionLayout(const std::vector<int64_t> &query,
                                                const std::vector<int64_t> &key,
                                                const std::vector<int64_t> &value,
                                                const std::vector<int64_t> &result,
                                                int64_t qHeads, int64_t kvHeads,
                                                AttentionLayout &l) {
  for (auto [shape, heads, what, into] :
       {std::make_tuple(&query, qHeads, "query", &l.q), std::make_tuple(&key, kvHeads, "key", &l.k),
        std::make_tuple(&value, kvHeads, "value", &l.v)})
    if (std::string problem = attentionHeads(*shape, heads, what, *into); !problem.empty())
      return problem;
  if (query.size() != key.size() || query.size() != value.size())
    return "query, key and value must all be 3-D or all 4-D";
  const AttentionHeads &q = l.q, &k = l.k, &v = l.v;
  if (k.batch != q.batch || v.batch != q.batch || k.dim != q.dim || v.heads != k.heads ||
      v.seq != k.seq)
    return "query " + shapeText(query) + ", key " + shapeText(key) + " and value " +
           shapeText(value) + " shapes disagree";
  if (k.heads < 1 || q.heads % k.heads)
    return "query heads " + std::to_string(q.heads) + " must be a multiple of key heads " +
           std::to_string(k.heads);
  AttentionHeads &y = l.y;
  y = q;
  y.dim = v.dim;
  if (result.size() == 4) {
    y.ss = y.dim;
    y.sh = y.seq * y.dim;
    y.sb = y.heads * y.sh;
  } else if (result.size() == 3) {
    y.sh = y.dim;
    y.ss = y.heads * y.dim;
    y.sb = y.seq * y.ss;
  } else {
    return "result must be 3-D or 4-D, has shape " + shapeText(result);
  }
  int64_t count = 1;
  for (int64_t d : result)
    count *= d;
  if (count != y.batch * y.heads * y.seq * y.dim)
    return "result " + shapeText(result) + " has the wrong number of elements";
  return "";
}

int64_t shardflow::runtime::collectiveDim(const Instruction &inst, const char *name,
                                          size_t rank) {
  int64_t d = inst.params.getInt(name);
  if (d < 0 || d >= int64_t(rank))
    throw RuntimeError(std::string(name) + " " + std::to_string(d) +
                       " is out of range for rank " + std::to_string(rank));
  return d;
}

std::pair<int, int> shardflow::runtime::permutePeers(const Instruction &inst, int rank) {
  std::vector<int64_t> pairs = inst.params.getInts("pairs");
  int dst = -1, src = -1;
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
    if (pairs[i] == rank)
      dst = int(pairs[i + 1]);
    if (pairs[i + 1] == rank)
      src = int(pairs[i]);
  }
  return {dst, src};
}
