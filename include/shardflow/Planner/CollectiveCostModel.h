//===- CollectiveCostModel.h - what a collective costs ---------*- C++ -*-===//
//
// The one place that says what moving data between ranks costs: an
// alpha-beta model per collective, with nccl-tests' bus-bandwidth factors
// (doc/PERFORMANCE.md there). A collective over n ranks of S "algorithm
// bytes" (nccl-tests' size: all_reduce's buffer, all_gather's output,
// reduce_scatter's input, all_to_all's buffer, a send's message) sends
// factor(n) * S bytes per rank with ring algorithms:
//
//   all_reduce 2(n-1)/n, all_gather (n-1)/n, reduce_scatter (n-1)/n,
//   all_to_all (n-1)/n, send / collective_permute 1, recv and local
//   slices 0,
//
// and takes latency + factor(n) * S / busBandwidth seconds on the links of
// the innermost level (a node's NVLink, the network between nodes) that
// holds the whole group. The reshard planner ranks reshards by the bytes a
// rank sends; shard-opt --report prints bytes and predicted time; the
// planner will search with the times.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_PLANNER_COLLECTIVECOSTMODEL_H
#define SHARDFLOW_PLANNER_COLLECTIVECOSTMODEL_H

#include "shardflow/Runtime/Format/Artifact.h"

#include "llvm/ADT/ArrayRef.h"

#include <string>
#include <vector>

namespace shardflow {

/// One level of a cluster's interconnect: groups of `ranksPerGroup`
/// consecutive ranks (a node's GPUs; 0: every rank) share it.
struct LinkLevel {
  std::string name;
  int64_t ranksPerGroup = 0;
  /// Seconds a collective takes however small (alpha).
  double latencySeconds = 0;
  /// nccl-tests' bus bandwidth at large sizes, bytes per second (1/beta).
  double busBandwidth = 1;
};

class CollectiveCostModel {
public:
  /// Levels innermost first; the last one must hold every rank.
  explicit CollectiveCostModel(std::vector<LinkLevel> levels);

  /// A cluster of H100 SXM nodes: 8 GPUs a node over NVLink 4 (all_reduce
  /// bus bandwidth about 360 GB/s in nccl-tests), nodes over one 400 Gb/s
  /// InfiniBand NDR port per GPU (about 45 GB/s).
  static CollectiveCostModel h100Cluster();

  /// nccl-tests' bus-bandwidth factor of `kind` over `ranks` ranks: the
  /// bytes a rank sends per algorithm byte.
  static double busBandwidthFactor(runtime::CollectiveKind kind, int64_t ranks);

  /// The bytes a rank sends for a collective of `algorithmBytes`.
  static double bytesSent(runtime::CollectiveKind kind, int64_t ranks, double algorithmBytes) {
    return busBandwidthFactor(kind, ranks) * algorithmBytes;
  }

  /// The innermost level whose groups hold all of `ranks` (world ranks).
  const LinkLevel &levelOf(llvm::ArrayRef<int64_t> ranks) const;

  /// Predicted seconds of one collective over `ranks`.
  double seconds(runtime::CollectiveKind kind, llvm::ArrayRef<int64_t> ranks,
                 double algorithmBytes) const;

  llvm::ArrayRef<LinkLevel> levels() const { return linkLevels; }

private:
  std::vector<LinkLevel> linkLevels;
};

} // namespace shardflow

#endif // SHARDFLOW_PLANNER_COLLECTIVECOSTMODEL_H
