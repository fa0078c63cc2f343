//===- CollectiveKind.cpp - the collectives' names in an artifact ----------===//

#include "shardflow/Runtime/Format/Artifact.h"

using namespace shardflow::runtime;

namespace {
struct KindName {
  CollectiveKind kind;
  const char *name;
};
constexpr KindName kKinds[] = {
    {CollectiveKind::AllReduce, "all_reduce"},
    {CollectiveKind::AllGather, "all_gather"},
    {CollectiveKind::ReduceScatter, "reduce_scatter"},
    {CollectiveKind::AllToAll, "all_to_all"},
    {CollectiveKind::CollectivePermute, "collective_permute"},
    {CollectiveKind::Send, "send"},
    {CollectiveKind::Recv, "recv"},
    {CollectiveKind::LocalSlice, "local_slice"},
};
} // namespace

const char *shardflow::runtime::collectiveKindName(CollectiveKind kind) {
  for (const KindName &k : kKinds)
    if (k.kind == kind)
      return k.name;
  return "an unknown collective";
}

std::optional<CollectiveKind> shardflow::runtime::parseCollectiveKind(std::string_view name) {
  for (const KindName &k : kKinds)
    if (name == k.name)
      return k.kind;
  return std::nullopt;
}
