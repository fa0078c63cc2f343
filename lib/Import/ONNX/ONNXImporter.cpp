//===- ONNXImporter.cpp - ONNX models into the nn dialect ------------------===//
//
// Walks the ONNX graph in topological order and emits one or a few nn ops
// per node. Every op is built through its type inference and verified on
// the spot, then folded when its operands are constants, so shape
// arithmetic (Shape -> Gather -> Concat -> Reshape) disappears as it is
// imported and later nodes see constant shapes. Any failure is reported as
// one error naming the node (name, op type, opset) and the reason.
//
// Untrusted input: every size, index and reference in the file is checked
// before use; libonnx and protobuf calls are wrapped so that nothing they
// throw escapes.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"

#include "onnx/defs/parser.h"

#include <cstring>
#include <unordered_map>

using namespace mlir;
using namespace shardflow;
using shardflow::onnx_import::GraphImporter;

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

std::string shardflow::parseInputShapeSpec(StringRef spec,
                                           ONNXImportOptions &options) {
  auto [name, dimsText] = spec.rsplit('=');
  if (name.empty() || !spec.contains('='))
    return "--input-shape expects NAME=D0,D1,... (got '" + spec.str() + "')";
  SmallVector<StringRef> parts;
  if (!dimsText.empty())
    dimsText.split(parts, dimsText.contains('x') ? 'x' : ',');
  SmallVector<int64_t> dims;
  for (StringRef p : parts) {
    int64_t d;
    if (p.trim().getAsInteger(10, d) || d < 0)
      return "--input-shape " + spec.str() + ": '" + p.str() +
             "' is not a non-negative integer";
    dims.push_back(d);
  }
  options.inputShapes[name] = dims;
  return "";
}

std::string shardflow::parseInputValueSpec(StringRef spec,
                                           ONNXImportOptions &options) {
  auto [name, file] = spec.split('=');
  if (name.empty() || file.empty())
    return "--input-value expects NAME=FILE.npy or NAME=FILE.pb (got '" +
           spec.str() + "')";
  if (!file.ends_with(".npy") && !file.ends_with(".pb"))
    return "--input-value " + spec.str() + ": the file must be .npy or .pb";
  options.inputValueFiles[name] = file.str();
  return "";
}

void shardflow::registerImportDialects(MLIRContext &context) {
  context.loadDialect<nn::NNDialect, func::FuncDialect>();
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

static bool looksLikeText(StringRef bytes) {
  StringRef s = bytes.ltrim();
  while (s.starts_with("#")) { // Comment lines, as in lit tests.
    s = s.drop_until([](char c) { return c == '\n'; }).ltrim();
  }
  return s.starts_with("<");
}

/// libonnx's text parser recurses for every nested graph (and type) and has
/// no depth limit of its own: deep nesting overflows the stack. The binary
/// path is bounded by protobuf's recursion limit (100 messages).
static constexpr int64_t kMaxTextNesting = 100;

/// The deepest nesting of {}, () and [] in ONNX text, outside strings and
/// '#' comments.
static int64_t textNestingDepth(StringRef text) {
  int64_t depth = 0, deepest = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '#') {
      i = text.find('\n', i);
      if (i == StringRef::npos)
        break;
    } else if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
    } else if (c == '{' || c == '(' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == '}' || c == ')' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

/// The parser's message quotes the whole offending line; keep each line short.
static std::string shortenLines(StringRef message, size_t width = 240) {
  SmallVector<StringRef> lines;
  message.split(lines, '\n');
  std::string out;
  for (auto [i, line] : llvm::enumerate(lines)) {
    out += i ? "\n" : "";
    out += line.size() > width ? (line.take_front(width) + "...").str()
                               : line.str();
  }
  return out;
}

/// Parses binary or text ONNX into `model`; emits a diagnostic on failure.
static LogicalResult parseModel(MLIRContext *context, StringRef bytes,
                                StringRef path, onnx::ModelProto &model,
                                bool &text) {
  Location fileLoc = FileLineColLoc::get(context, path, 0, 0);
  text = looksLikeText(bytes);
  try {
    if (text) {
      std::string copy = bytes.str(); // The parser wants a C string.
      int64_t depth = textNestingDepth(StringRef(copy.c_str()));
      if (depth > kMaxTextNesting)
        return emitError(fileLoc) << "cannot parse ONNX text: brackets nest "
                                  << depth << " levels deep; at most "
                                  << kMaxTextNesting << " are supported";
      auto status = onnx::OnnxParser::Parse(model, copy.c_str());
      if (!status.IsOK())
        return emitError(fileLoc) << "cannot parse ONNX text: "
                                  << shortenLines(status.ErrorMessage());
    } else {
      if (bytes.size() > size_t(std::numeric_limits<int>::max()))
        return emitError(fileLoc)
               << "model file is over 2 GiB; store the weights as ONNX "
                  "external data";
      if (!model.ParseFromArray(bytes.data(), int(bytes.size())))
        return emitError(fileLoc)
               << "not a valid ONNX model (protobuf parse failed: truncated "
                  "or corrupt file?)";
    }
  } catch (const std::logic_error &e) {
    // std::stoll and friends in the text parser: a number it cannot convert.
    return emitError(fileLoc)
           << (text ? "cannot parse ONNX text" : "cannot read ONNX model")
           << ": a number is malformed or out of range (" << e.what() << ")";
  } catch (const std::exception &e) {
    return emitError(fileLoc) << "cannot read ONNX model: " << e.what();
  } catch (...) {
    return emitError(fileLoc) << "cannot read ONNX model";
  }
  if (!model.has_graph())
    return emitError(fileLoc) << "model has no graph";
  return success();
}

OwningOpRef<ModuleOp>
shardflow::importONNXBuffer(MLIRContext *context, StringRef bytes,
                            StringRef path, const ONNXImportOptions &options) {
  registerImportDialects(*context);
  onnx::ModelProto model;
  bool text = false;
  if (failed(parseModel(context, bytes, path, model, text)))
    return nullptr;
  GraphImporter importer(context, model, path, text ? StringRef() : bytes,
                         options);
  return importer.run();
}

/// The model in `path` (binary or text), for reading its initializers.
static LogicalResult readModelFile(MLIRContext *context, StringRef path,
                                   onnx::ModelProto &model) {
  registerImportDialects(*context);
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return emitError(FileLineColLoc::get(context, path, 0, 0))
           << "cannot open '" << path << "': " << buffer.getError().message();
  bool text = false;
  return parseModel(context, (*buffer)->getBuffer(), path, model, text);
}

LogicalResult shardflow::readInitializerBytes(MLIRContext *context,
                                              StringRef path,
                                              ArrayRef<std::string> names,
                                              llvm::StringMap<std::string> &out) {
  onnx::ModelProto model;
  if (failed(readModelFile(context, path, model)))
    return failure();
  ONNXImportOptions options;
  GraphImporter importer(context, model, path, StringRef(), options);
  llvm::StringSet<> wanted;
  for (const std::string &n : names)
    wanted.insert(n);
  for (const auto &init : model.graph().initializer()) {
    if (!wanted.contains(init.name()))
      continue;
    auto bytes = importer.initializerBytes(init);
    if (failed(bytes))
      return failure();
    out[init.name()] = std::move(*bytes);
  }
  for (const std::string &n : names)
    if (!out.count(n))
      return emitError(FileLineColLoc::get(context, path, 0, 0))
             << "the model has no initializer '" << n << "'";
  return success();
}

FailureOr<std::vector<std::string>>
shardflow::findTiedInitializers(MLIRContext *context, StringRef path,
                                ArrayRef<std::string> names) {
  onnx::ModelProto model;
  if (failed(readModelFile(context, path, model)))
    return failure();
  ONNXImportOptions options;
  GraphImporter importer(context, model, path, StringRef(), options);
  llvm::StringMap<const onnx::TensorProto *> byName;
  for (const auto &init : model.graph().initializer())
    byName[init.name()] = &init;
  struct Seen {
    std::string name;
    std::vector<int64_t> dims;
    std::string bytes;
  };
  std::vector<Seen> seen;
  // Earlier initializers by their bytes' hash.
  std::unordered_map<size_t, std::vector<size_t>> plain;
  std::vector<std::string> ties;
  for (const std::string &name : names) {
    auto it = byName.find(name);
    if (it == byName.end())
      continue;
    const onnx::TensorProto &t = *it->second;
    if (t.data_type() != onnx::TensorProto::FLOAT)
      continue;
    auto bytes = importer.initializerBytes(t);
    if (failed(bytes))
      return failure();
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    size_t h = std::hash<std::string>()(*bytes);
    bool tied = false;
    for (size_t j : plain[h])
      if (seen[j].dims == dims && seen[j].bytes == *bytes) {
        ties.push_back(name + "=" + seen[j].name);
        tied = true;
        break;
      }
    if (!tied && dims.size() == 2) {
      // The candidate's transpose: same bytes as a source of shape [d1, d0].
      std::string flipped(bytes->size(), '\0');
      int64_t rows = dims[0], cols = dims[1];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          std::memcpy(&flipped[size_t(c * rows + r) * 4], &(*bytes)[size_t(r * cols + c) * 4], 4);
      for (size_t j : plain[std::hash<std::string>()(flipped)])
        if (seen[j].dims == std::vector<int64_t>{cols, rows} && seen[j].bytes == flipped) {
          ties.push_back(name + "=" + seen[j].name + "^T");
          tied = true;
          break;
        }
    }
    if (tied)
      continue;
    plain[h].push_back(seen.size());
    seen.push_back({name, std::move(dims), std::move(*bytes)});
  }
  return ties;
}

OwningOpRef<ModuleOp>
shardflow::importONNXFile(MLIRContext *context, StringRef path,
                          const ONNXImportOptions &options) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(FileLineColLoc::get(context, path, 0, 0))
        << "cannot open '" << path << "': " << buffer.getError().message();
    return nullptr;
  }
  return importONNXBuffer(context, (*buffer)->getBuffer(), path, options);
}
