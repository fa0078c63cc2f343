//===- CollectiveCostModel.cpp - what a collective costs -------------------===//

#include "shardflow/Planner/CollectiveCostModel.h"

#include <algorithm>
#include <cassert>

using namespace shardflow;
using runtime::CollectiveKind;

CollectiveCostModel::CollectiveCostModel(std::vector<LinkLevel> levels)
    : linkLevels(std::move(levels)) {
  assert(!linkLevels.empty() && linkLevels.back().ranksPerGroup == 0 &&
         "the last level holds every rank");
}

CollectiveCostModel CollectiveCostModel::h100Cluster() {
  return CollectiveCostModel({{"NVLink", 8, 10e-6, 360e9}, {"InfiniBand", 0, 25e-6, 45e9}});
}

double CollectiveCostModel::busBandwidthFactor(CollectiveKind kind, int64_t ranks) {
  double n = double(std::max<int64_t>(ranks, 1));
  switch (kind) {
  case CollectiveKind::AllReduce:
    return 2 * (n - 1) / n;
  case CollectiveKind::AllGather:
  case CollectiveKind::ReduceScatter:
  case CollectiveKind::AllToAll:
    return (n - 1) / n;
  case CollectiveKind::Send:
  case CollectiveKind::CollectivePermute:
    return 1;
  case CollectiveKind::Recv:
  case CollectiveKind::LocalSlice:
    return 0;
  }
  return 0;
}

const LinkLevel &CollectiveCostModel::levelOf(llvm::ArrayRef<int64_t> ranks) const {
  for (const LinkLevel &level : linkLevels) {
    if (level.ranksPerGroup <= 0 || ranks.empty())
      return level;
    int64_t group = ranks.front() / level.ranksPerGroup;
    if (llvm::all_of(ranks, [&](int64_t r) { return r / level.ranksPerGroup == group; }))
      return level;
  }
  return linkLevels.back();
}

double CollectiveCostModel::seconds(CollectiveKind kind, llvm::ArrayRef<int64_t> ranks,
                                    double algorithmBytes) const {
  double factor = busBandwidthFactor(kind, int64_t(ranks.size()));
  if (factor == 0)
    return 0;
  const LinkLevel &level = levelOf(ranks);
  return level.latencySeconds + factor * algorithmBytes / level.busBandwidth;
}
