//===- shardflow-tblgen.cpp - Shardflow's TableGen backends ----------------===//
//
// mlir-tblgen's driver with Shardflow's own generators linked in
// (-gen-kernel-signatures).
//
//===----------------------------------------------------------------------===//

#include "mlir/Tools/mlir-tblgen/MlirTblgenMain.h"

int main(int argc, char **argv) { return mlir::MlirTblgenMain(argc, argv); }
