//===- Artifact.h - the .shard artifact: data model and format -*- C++ -*-===//
//
// What the compiler hands to shard-run: one rank program (buffers and
// kernel calls), where each weight's bytes lie, and the graph's inputs and
// outputs. Plain C++ so that both the compiler (writer) and the runtime
// (reader) use this one definition.
//
// The format is line-oriented text, versioned by its first line:
//
//   shardflow-artifact 1
//   target cpu
//   world-size 1
//   model-dir /path/to/model/folder
//   arena 47168
//   buffer 0 input i64 2x8 name=input_ids
//   buffer 1 weight f32 128x64 name=wte.weight storage=external file=m.data offset=0 size=32768
//   buffer 2 arena f32 2x8x64 offset=0
//   buffer 3 view f32 2x8x4x16 source=2
//   buffer 4 constant i64 2 data=0100000000000000ff00000000000000
//   kernel gather in=1,0 out=2 axis=i:0
//   output logits 3
//   end
//
// Shapes are `AxBxC` or `scalar`; names and strings are percent-encoded;
// parameters are typed: i: (integer, also booleans), f: (float), s:
// (string), is: / fs: (lists), t: (element type).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_ARTIFACT_H
#define SHARDFLOW_RUNTIME_ARTIFACT_H

#include "shardflow/Runtime/Kernel.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace shardflow::runtime {

struct BufferDesc {
  enum class Kind { Input, Arena, View, Weight, Constant };
  Kind kind = Kind::Arena;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t offset = 0;        // Arena: byte offset in the arena
  int source = -1;           // View: the buffer whose bytes it views
  std::string name;          // Input and Weight: the ONNX name
  std::string storage;       // Weight: external | embedded | artifact
  std::string file;          // Weight: relative to the model folder
                             // (artifact: to the artifact's folder)
  int64_t fileOffset = 0;    // Weight: byte offset in `file`
  std::vector<uint8_t> data; // Constant: little-endian bytes (bool: 1 byte)

  int64_t numel() const;
  size_t bytes() const { return size_t(numel()) * dtypeSize(dtype); }
};

struct Instruction {
  std::string kernel;
  std::vector<int> inputs, outputs;
  Params params;
};

struct Artifact {
  static constexpr int kVersion = 1;
  std::string target = "cpu";
  int worldSize = 1;
  std::string modelDir;
  int64_t arenaBytes = 0;
  std::vector<BufferDesc> buffers;
  std::vector<Instruction> program;
  std::vector<std::pair<std::string, int>> outputs; // name, buffer
  /// Not serialized: the folder the artifact was read from, where weights
  /// with storage "artifact" (converted at compile time) live.
  std::string artifactDir;
};

/// Writes the text form.
void writeArtifact(const Artifact &artifact, std::ostream &os);
/// Parses and checks an artifact (version, target, references, sizes).
/// Throws RuntimeError naming the file, the line and the problem.
Artifact readArtifact(const std::string &path);
Artifact parseArtifact(const std::string &text, const std::string &path);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_ARTIFACT_H
