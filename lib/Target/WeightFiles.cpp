//===- WeightFiles.cpp - side weights and weight checksums -----------------===//
//
// See WeightFiles.h. Checksums are computed over exactly the runs of bytes
// the runtime's loader reads for each rank (forEachWeightRun), zero padding
// included, so a rank's check covers what it maps and nothing else.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Target/WeightFiles.h"
#include "shardflow/Runtime/Format/Checksum.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mlir;
using namespace shardflow;
namespace rtm = shardflow::runtime;

std::vector<std::string> shardflow::unmappableWeights(const rtm::Artifact &artifact) {
  std::vector<std::string> names;
  for (const rtm::BufferDesc &b : artifact.buffers)
    if (b.kind == rtm::BufferDesc::Kind::Weight && b.storage == "protobuf")
      names.push_back(b.name);
  return names;
}

LogicalResult shardflow::writeSideWeights(rtm::Artifact &artifact,
                                          const llvm::StringMap<std::string> &bytes,
                                          StringRef outputFile, Location loc) {
  std::string sidePath = (outputFile + ".weights").str();
  std::error_code ec;
  llvm::raw_fd_ostream side(sidePath, ec);
  if (ec)
    return emitError(loc, "cannot write '") << sidePath << "': " << ec.message();
  uint64_t offset = 0;
  for (rtm::BufferDesc &b : artifact.buffers) {
    if (b.kind != rtm::BufferDesc::Kind::Weight || b.storage != "protobuf")
      continue;
    auto found = bytes.find(b.name);
    if (found == bytes.end())
      return emitError(loc, "no bytes were read for weight '") << b.name << "'";
    const std::string &data = found->second;
    uint64_t aligned = (offset + 63) / 64 * 64;
    side.write_zeros(aligned - offset);
    side << data;
    b.storage = "artifact";
    b.file = llvm::sys::path::filename(sidePath).str();
    b.fileOffset = int64_t(aligned);
    offset = aligned + data.size();
  }
  return success();
}

LogicalResult shardflow::addWeightChecksums(rtm::Artifact &artifact, StringRef outputFile,
                                            Location loc) {
  SmallString<256> artifactDir(outputFile);
  llvm::sys::path::remove_filename(artifactDir);
  if (artifactDir.empty())
    artifactDir = ".";
  llvm::StringMap<std::unique_ptr<llvm::MemoryBuffer>> files;
  for (rtm::BufferDesc &b : artifact.buffers) {
    if (b.kind != rtm::BufferDesc::Kind::Weight || b.storage == "zeros")
      continue;
    SmallString<256> path(b.storage == "artifact" ? artifactDir.str()
                                                  : StringRef(artifact.modelDir));
    llvm::sys::path::append(path, b.file);
    auto &file = files[path];
    if (!file) {
      auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                                /*RequiresNullTerminator=*/false);
      if (!buffer)
        return emitError(loc, "cannot read weight file '")
               << path << "' (for '" << b.name << "'): " << buffer.getError().message()
               << "; pass --weight-checksums=false to compile without it";
      file = std::move(*buffer);
    }
    size_t size = file->getBufferSize();
    const uint8_t *base = reinterpret_cast<const uint8_t *>(file->getBufferStart());
    b.crc32c.clear();
    int slices = b.starts.empty() ? 1 : artifact.worldSize;
    for (int rank = 0; rank < slices; ++rank) {
      uint32_t crc = 0;
      bool inside = true;
      rtm::forEachWeightRun(b, rank, [&](size_t offset, size_t length) {
        if (offset == rtm::kZeroRun) {
          // Zero padding past the stored tensor: the loader's zeros.
          static const uint8_t zeros[4096] = {};
          for (size_t done = 0; done < length; done += sizeof(zeros))
            crc = rtm::crc32c(zeros, std::min(sizeof(zeros), length - done), crc);
          return;
        }
        size_t at = size_t(b.fileOffset) + offset;
        if (b.fileOffset < 0 || at + length > size) {
          inside = false;
          return;
        }
        crc = rtm::crc32c(base + at, length, crc);
      });
      if (!inside)
        return emitError(loc, "weight '")
               << b.name << "' lies past the end of '" << path << "' (" << size << " bytes)";
      b.crc32c.push_back(crc);
    }
  }
  return success();
}
