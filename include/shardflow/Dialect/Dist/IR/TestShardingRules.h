//===- TestShardingRules.h - a pass that prints sharding rules -*- C++ -*-===//
//
// `-test-dist-sharding-rules` remarks the sharding rule of every nn op in a
// function, so that lit tests can check the registry op by op.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_DIST_IR_TESTSHARDINGRULES_H
#define SHARDFLOW_DIALECT_DIST_IR_TESTSHARDINGRULES_H

namespace shardflow::dist {

/// Registers `-test-dist-sharding-rules` with the global pass registry.
void registerTestShardingRulesPass();

} // namespace shardflow::dist

#endif // SHARDFLOW_DIALECT_DIST_IR_TESTSHARDINGRULES_H
