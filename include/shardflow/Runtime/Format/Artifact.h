//===- Artifact.h - the .shard artifact: data model and format -*- C++ -*-===//
//
// What the compiler hands to shard-run: one rank program (buffers and
// kernel calls), where each weight's bytes lie, and the graph's inputs and
// outputs. Plain C++ so that both the compiler (writer) and the runtime
// (reader) use this one definition.
//
// The format is line-oriented text, versioned by its first line:
//
//   shardflow-artifact 4
//   target cpu
//   world-size 2
//   model-dir /path/to/model/folder
//   arena 47168
//   buffer 0 input i64 2x8 name=input_ids
//   buffer 1 weight f32 128x64 name=wte.weight storage=external file=m.data offset=0 size=32768 crc32c=1f2e3d4c
//   buffer 2 weight f32 32x64 name=w1 storage=external file=m.data offset=32768 size=8192 global=64x64 starts=0,0;32,0 crc32c=0a0b0c0d;01020304
//   buffer 3 arena f32 2x8x64 offset=0
//   buffer 4 view f32 2x8x4x16 source=3
//   buffer 5 constant i64 2 data=0100000000000000ff00000000000000
//   kernel gather in=1,0 out=3 axis=i:0
//   collective all_reduce in=3 out=3 groups=is:0,1 group_size=i:2 reduction=s:sum
//   collective local_slice in=0 out=3 starts=is:0,0,1,0
//   output logits 4
//   end
//
// A CUDA artifact (`target cuda`) also carries the device code the compiler
// generated, one `module` line per gpu.module and architecture, and calls it
// with `launch` kernel lines:
//
//   module kernels arch=sm_90 format=cubin data=f0VMRgIBAUEI...
//   module kernels arch=compute_80 format=ptx data=Ly8KLy8gR2Vu...
//   kernel launch in=3,1 out=6 module=s:kernels function=s:fused_0 grid=is:96,1,1 block=is:256,1,1 shared=i:0
//
// `data` is base64. A cubin runs on its own architecture only; the PTX (one
// per module, for the oldest architecture) lets the driver compile for newer
// GPUs. A launch passes one device pointer per `in` then per `out` buffer,
// in order (static shapes: the kernel knows every size). A launch with
// `checks=i:1` (and `node=s:NAME`, the ONNX node it names in errors) also
// passes, last, a status word of two int64 the runtime zeroes before each
// run: the kernel writes a code (1 index out of range, 2 integer division
// by zero) and a value, and the run fails. (Version 4: version 3 called
// this `index_checks`.)
//
// Mixed precision: a weight whose buffer type differs from the type of its
// bytes in the file records that type (`source-dtype=f32`); the runtime
// converts it once at load. `size`, `offset`, the slice runs and `crc32c`
// all refer to the bytes in the file.
//
// Layout: a weight with `permutation=P` (a comma list, one entry per
// dimension) holds its elements with the dimensions permuted, buffer
// dimension i being dimension P[i] of the bytes in the file; the buffer's
// shape is the permuted one, while `global`, `starts`, `size` and `crc32c`
// keep the file's order. The runtime permutes once at load, after any
// conversion. (An optional field: a reader that predates it refuses it as
// an unknown field, with its line.)
//
// Zero padding: a sliced weight with `padded=zeros` may have slices that
// reach past `global` (the tensor in the file, not starting past it):
// what lies past reads as zeros, and `crc32c` covers those zeros too. The
// compiler pads a vocabulary that the tensor-parallel size does not divide.
// (An optional field, as `permutation`.)
//
// Class labels: an integer input with `range=LO,HI` (and `ignore=V`) may
// only hold values in [LO, HI) (or V); the runtime checks the data it is
// given (shard-run --data). (Optional fields, as `permutation`.)
//
// Training state: a weight with `writable=1` is state the program writes
// (a `kernel identity` whose `out` is the weight, last): the device keeps
// it in writable memory of its own and it keeps its value from one run to
// the next (a training step's weights, optimizer moments and step
// counter). Its initial value is the file's, or zeros for `storage=zeros`
// (no file). (Optional fields, as `permutation`.)
//
// Padded outputs (target cuda): `output logits 7 columns=50257` returns the
// leading 50257 elements of each row of buffer 7, whose last dimension is
// the row pitch (a GEMM's result padded to 16-byte aligned rows); the
// runtime downloads them with one 2-D copy. (An optional field.)
//
// Shapes are `AxBxC` or `scalar`; names and strings are percent-encoded;
// parameters are typed: i: (integer, also booleans), f: (float), s:
// (string), is: / fs: (lists), t: (element type).
//
// Weights: `offset` is where the whole (global) tensor starts in `file`.
// A weight without `global` is loaded whole by every rank. With
// `global=SHAPE starts=R0;R1;...` (one comma list per rank, in rank order)
// rank r loads the slice of the global tensor that starts at its list and
// has the buffer's shape: this is the table of which slice of which weight
// each rank needs. `crc32c` is the CRC-32C of the bytes each rank loads,
// one per rank for a sliced weight.
//
// Collectives run over `groups`: the flattened, equally sized rank groups
// (`group_size` each); a rank in no group skips the instruction. The
// program runner (Core/ProgramRunner.h) documents each collective's
// parameters.
//
// `collective` lines are the instructions whose effect depends on the
// rank. One of them moves no data between ranks: `local_slice` copies this
// rank's block of `in` into `out`; `starts` holds one start index list per
// rank, flattened in rank order (each as long as `out`'s rank).
//
// Instruction names are an open set within a format version: adding a
// kernel or a collective changes no line's grammar, so it bumps nothing. A
// reader refuses a collective it does not know by name, with the line (and
// a kernel it has no implementation of when the program is run); it never
// misreads one. The version changes when a line kind or field changes.
//
#ifndef SHARDFLOW_RUNTIME_ARTIFACT_H
#define SHARDFLOW_RUNTIME_ARTIFACT_H

#include "shardflow/Runtime/Format/Kernel.h"

#include <functional>
#include <iosfwd>
#include <optional>
#include <utility>
#include <string>
#include <string_view>
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
  std::vector<int64_t> globalShape;         // Weight: the whole tensor if sliced
  std::vector<std::vector<int64_t>> starts; // Weight: per rank, if sliced
  /// Weight: a slice may reach past `globalShape` (the tensor in the
  /// file); what lies past reads as zeros (a vocabulary padded to a
  /// multiple of the tensor-parallel size). Text: `padded=zeros`.
  bool zeroPadded = false;
  std::vector<uint32_t> crc32c;             // Weight: one, or one per rank
  /// Weight: the element type of the bytes in the file, when the buffer's
  /// type differs (converted at load); absent when they agree.
  std::optional<DType> sourceDType;
  /// Weight: the buffer holds its (sliced, converted) elements with the
  /// dimensions permuted, buffer dimension i being stored dimension
  /// permutation[i] (a layout chosen at compile time, applied at load);
  /// empty when the buffer keeps the stored order.
  std::vector<int64_t> permutation;
  /// Weight: a factor its elements are multiplied by at load, in f64
  /// before they are rounded to the buffer's type (a weight-only product
  /// folded by the compiler). Text: `scale=`.
  std::optional<double> scale;
  /// Input: the values an integer input may hold, [first, second) (class
  /// labels: [0, classes)), and one more value allowed outside it (the
  /// ignored label). Text: `range=0,128 ignore=-100`.
  std::optional<std::pair<int64_t, int64_t>> validRange;
  std::optional<int64_t> ignoreValue;
  /// Weight: persistent state the program writes (a training step's
  /// weights, optimizer moments and step counter): the device holds it in
  /// memory of its own, and it keeps its value from one run to the next.
  /// Text: `writable=1`.
  bool writable = false;
  /// Writable weight: the initializer's shape in the model, when the
  /// program views it in another (a fused projection seen as [K, k, N]);
  /// what --save-weights writes. Text: `model-shape=64x192`.
  std::vector<int64_t> modelShape;
  std::vector<uint8_t> data; // Constant: little-endian bytes (bool: 1 byte)

  int64_t numel() const;
  size_t bytes() const { return size_t(numel()) * dtypeSize(dtype); }
  /// Weight: the element type of its bytes in the file.
  DType fileDType() const { return sourceDType.value_or(dtype); }
  /// Weight: the bytes this buffer's elements occupy in the file.
  size_t fileBytes() const { return size_t(numel()) * dtypeSize(fileDType()); }
  /// Weight: the shape of its elements in the file (of this rank's slice
  /// when sliced): `shape` with the permutation undone.
  std::vector<int64_t> storedShape() const;
};

/// Device code generated by the compiler: one gpu.module compiled for one
/// architecture ("sm_90": a cubin; "compute_80": PTX text).
struct DeviceModule {
  std::string name;
  std::string arch;
  std::string format; // "cubin" or "ptx"
  std::vector<uint8_t> data;
};

/// The collectives an artifact names (`collective NAME ...`; see
/// ProgramRunner.h for each one's parameters): the reader parses the name
/// once, and the runtime (the program runner, both communicators) goes by
/// the kind. Names appear as text only here and in the reader and writer.
enum class CollectiveKind : uint8_t {
  AllReduce,         // all_reduce
  AllGather,         // all_gather
  ReduceScatter,     // reduce_scatter
  AllToAll,          // all_to_all
  CollectivePermute, // collective_permute
  Send,              // send
  Recv,              // recv
  LocalSlice,        // local_slice (moves no data between ranks)
};
/// The name of `kind` in an artifact ("all_reduce").
const char *collectiveKindName(CollectiveKind kind);
/// The kind an artifact's name stands for, or nothing for an unknown name.
std::optional<CollectiveKind> parseCollectiveKind(std::string_view name);

struct Instruction {
  /// A kernel call, or a collective between ranks (see ProgramRunner.h).
  bool collective = false;
  /// The kernel's name, or the collective's (what the writer writes).
  std::string kernel;
  /// A collective's kind, set by the reader from its name.
  CollectiveKind collectiveKind = CollectiveKind::AllReduce;
  std::vector<int> inputs, outputs;
  Params params;
};

/// "kernel 'K' (ONNX node 'N', instruction n)" or "collective 'K' (...)",
/// the node left out when the instruction names none: how errors name it.
std::string describeInstruction(const Instruction &inst, size_t n);

struct Artifact {
  static constexpr int kVersion = 4;
  std::string target = "cpu";
  int worldSize = 1;
  std::string modelDir;
  int64_t arenaBytes = 0;
  std::vector<BufferDesc> buffers;
  std::vector<DeviceModule> modules; // target cuda: device code
  std::vector<Instruction> program;
  std::vector<std::pair<std::string, int>> outputs; // name, buffer
  /// Per output, parallel to `outputs` (shorter, or 0: the whole buffer):
  /// how many leading elements of each row (the buffer's last dimension)
  /// are the output. The buffer's last dimension is then the row pitch: a
  /// GEMM's result padded to aligned rows (target cuda), downloaded with
  /// one 2-D copy. See outputShape().
  std::vector<int64_t> outputColumns;
  /// Not serialized: the folder the artifact was read from, where weights
  /// with storage "artifact" (converted at compile time) live.
  std::string artifactDir;
};

/// The bytes weight `b` loads on `rank`, as contiguous runs in row-major
/// order of the slice (in the stored order of dimensions, before any
/// permutation): fn(offset, length), offsets from the start of the whole
/// tensor in its file (in its file's element type, `fileDType`). A whole
/// (unsliced) weight is one run; so is a slice whose rows are adjacent in
/// the file. A zero-padded weight's slice part past the tensor comes as
/// runs at offset kZeroRun: that many bytes of zeros.
constexpr size_t kZeroRun = ~size_t(0);
void forEachWeightRun(const BufferDesc &b, int rank,
                      const std::function<void(size_t offset, size_t length)> &fn);

/// Output `o`'s columns (0: the whole buffer) and shape: its buffer's,
/// with the last dimension cut to the columns when they are set.
int64_t outputColumnsOf(const Artifact &a, size_t o);
std::vector<int64_t> outputShape(const Artifact &a, size_t o);

/// Writes the text form.
void writeArtifact(const Artifact &artifact, std::ostream &os);
/// Parses and checks an artifact (version, target, references, sizes).
/// Throws RuntimeError naming the file, the line and the problem.
Artifact readArtifact(const std::string &path);
Artifact parseArtifact(const std::string &text, const std::string &path);

/// Names and strings as the text form writes them: percent-encoded
/// (spaces, '%', '=', ',', control and non-ASCII bytes); decoding gives
/// std::nullopt for a bad escape.
std::string encodeArtifactText(const std::string &s);
std::optional<std::string> decodeArtifactText(const std::string &s);

/// Base64 (RFC 4648, with padding), used for `module` data.
std::string encodeBase64(const std::vector<uint8_t> &bytes);
/// Returns false when `text` is not valid base64.
bool decodeBase64(const std::string &text, std::vector<uint8_t> &bytes);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_ARTIFACT_H
