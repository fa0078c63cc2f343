//===- FindLayers.cpp - the repeated blocks of a model --------------------===//
//
// Finds the layers of a model in its nn program: the longest run of K >= 2
// consecutive blocks of structurally identical ops, each block reading
// weights of its own and reading what the block before it computed, with
// the prologue before the run and the epilogue after it (more runs are
// looked for in those: an encoder-decoder has two stacks). nn-find-layers
// records the result on the module as `nn.layers`; the program is left as
// it is.
//
// Names are never looked at (TorchScript names weights `onnx::MatMul_655`)
// and neither is the exporters' program order, which interleaves layers (a
// mask or shape computation of layer k+1 emitted among layer k's ops):
//
//   1. Ops fall into three kinds. Weights: nn.weight, and initializers
//      embedded as nn.constant (located at their name alone, more than one
//      element). Activations: ops that read a weight, a float argument or
//      an activation. Side computations: the rest, computed from integer
//      inputs and constants only (masks, positions, constants).
//   2. The activations are put in an order of their own: depth first from
//      each value read twice (the residual stream, an encoder's output), in
//      program order of those values, each op after its operands in operand
//      order. The order follows the dataflow, so every layer's ops come
//      out in the same order, one layer after the other; a value that many
//      later ops read is placed before the first of them.
//   3. In that order, op i and op i+P are alike when they have the same
//      name, attributes (other than names) and types, and read alike
//      operands: the same value, activations P apart, or weights and side
//      computations of the same kind and type. The longest run of such
//      pairs for a period P gives K = floor(run / P) + 1 blocks; where the
//      run leaves slack, the blocks start where the fewest values cross a
//      boundary. A run counts only when each block reads weights no other
//      block reads and reads what the block before it computed (parallel
//      look-alikes, such as the query, key and value projections, do not).
//   4. Weights and side computations go with the block that alone reads
//      them (a layer's mask), when every block then gets the same ones;
//      otherwise before the stack: what several blocks read is shared.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/Transforms/FindLayers.h"
#include "shardflow/Dialect/NN/Transforms/Passes.h"
#include "shardflow/Support/ONNXLocation.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>

namespace shardflow::nn {
#define GEN_PASS_DEF_NNFINDLAYERS
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;
using namespace shardflow::nn;

namespace {

/// The initializer `op` is, if it is one: an nn.weight, or an initializer
/// embedded as nn.constant (the importer locates those at their name alone)
/// of more than one element.
std::optional<StringRef> initializerName(Operation *op) {
  if (auto w = dyn_cast<nn::WeightOp>(op))
    return w.getName();
  auto c = dyn_cast<nn::ConstantOp>(op);
  StringRef name = c ? getInitializerName(c->getLoc()) : "";
  if (!name.empty() && cast<ShapedType>(c.getType()).getNumElements() > 1)
    return name;
  return std::nullopt;
}

enum class Kind { Side, Weight, Activation };

/// A stack as positions in the activation order: K blocks of P ops from
/// `start`.
struct Run {
  unsigned start, period, count;
  unsigned end() const { return start + period * count; }
};

/// Where an op goes: the prologue, a block of a stack, the ops between
/// stacks or the epilogue. Ids grow with the position in the program.
struct Region {
  enum { Prologue, Block, Between, Epilogue } kind;
  unsigned stack = 0, block = 0;
};

class LayerFinder {
public:
  explicit LayerFinder(func::FuncOp fn) : fn(fn) {}

  FailureOr<LayerStructure> find() {
    if (fn.isExternal() || !llvm::hasSingleElement(fn.getBody()))
      return failure();
    classify();
    order();
    crossing = crossingCounts();
    SmallVector<Run> runs;
    findRuns(0, sequence.size(), runs);
    if (runs.empty())
      return failure();
    llvm::sort(runs, [](const Run &a, const Run &b) { return a.start < b.start; });
    return assemble(runs);
  }

private:
  func::FuncOp fn;
  SmallVector<Operation *> ops; // program order, without the terminator
  DenseMap<Operation *, Kind> kinds;
  DenseMap<Operation *, unsigned> classes; // structural class
  SmallVector<Operation *> sequence;       // the activations, in our order
  DenseMap<Operation *, unsigned> position;
  SmallVector<int> crossing; // per cut of the sequence: the values crossing it

  Kind kindOf(Value v) const {
    Operation *def = v.getDefiningOp();
    if (!def)
      return isa<FloatType>(getElementTypeOrSelf(v.getType())) ? Kind::Activation : Kind::Side;
    return kinds.lookup(def);
  }

  /// Sorts the ops into the three kinds and gives each its structural
  /// class: name, attributes other than names (discardable ones carry a
  /// dialect prefix) and types; weights and constants by type alone, their
  /// values being data.
  void classify() {
    DenseMap<llvm::hash_code, unsigned> ids;
    Block &body = fn.getBody().front();
    for (Operation &op : body.without_terminator()) {
      ops.push_back(&op);
      llvm::hash_code h;
      if (initializerName(&op)) {
        kinds[&op] = Kind::Weight;
        h = llvm::hash_combine(StringRef("initializer"), op.getResult(0).getType());
      } else {
        bool active =
            llvm::any_of(op.getOperands(), [&](Value v) { return kindOf(v) != Kind::Side; });
        kinds[&op] = active ? Kind::Activation : Kind::Side;
        h = llvm::hash_combine(op.getName().getAsOpaquePointer(), op.getNumOperands());
        for (Type t : op.getResultTypes())
          h = llvm::hash_combine(h, t);
        for (Type t : op.getOperandTypes())
          h = llvm::hash_combine(h, t);
        if (op.getNumOperands() != 0)
          for (NamedAttribute a : op.getAttrs())
            if (!a.getName().getValue().contains('.') && a.getName() != "name")
              h = llvm::hash_combine(h, a.getName(), a.getValue());
      }
      classes[&op] = ids.try_emplace(h, ids.size()).first->second;
    }
  }

  /// Puts the activations in dataflow order: depth first (operands in
  /// order) from each value read twice that depends on an input, in
  /// program order, then from the results.
  void order() {
    DenseSet<Operation *> fromInput;
    auto emit = [&](Operation *root) {
      SmallVector<std::pair<Operation *, unsigned>> stack{{root, 0}};
      while (!stack.empty()) {
        Operation *op = stack.back().first;
        unsigned i = stack.back().second++;
        if (i < op->getNumOperands()) {
          Operation *def = op->getOperand(i).getDefiningOp();
          if (def && kinds.lookup(def) == Kind::Activation && !position.count(def))
            stack.push_back({def, 0});
          continue;
        }
        stack.pop_back();
        // The terminator, a root, is no activation.
        if (kinds.lookup(op) == Kind::Activation &&
            position.try_emplace(op, sequence.size()).second)
          sequence.push_back(op);
      }
    };
    for (Operation *op : ops) {
      if (llvm::any_of(op->getOperands(), [&](Value v) {
            Operation *def = v.getDefiningOp();
            return !def || fromInput.contains(def);
          }))
        fromInput.insert(op);
      if (kinds.lookup(op) != Kind::Activation || position.count(op))
        continue;
      bool readTwice = llvm::any_of(op->getResults(), [](Value r) {
        auto users = r.getUsers();
        return !users.empty() &&
               llvm::any_of(users, [&](Operation *u) { return u != *users.begin(); });
      });
      if ((readTwice && fromInput.contains(op)) || op->use_empty())
        emit(op);
    }
    emit(fn.getBody().front().getTerminator());
  }

  /// Whether operand `a` of the op at i and `b` of the op at i + period
  /// play the same part.
  bool alike(Value a, Value b, unsigned i, unsigned period) const {
    if (a == b)
      return true;
    Operation *da = a.getDefiningOp(), *db = b.getDefiningOp();
    if (!db)
      return !da && a.getType() == b.getType();
    Kind kb = kinds.lookup(db);
    if (!da) // the first block reads an argument where the next reads the first
      return kb == Kind::Activation && position.lookup(db) >= i;
    if (kinds.lookup(da) != kb ||
        cast<OpResult>(a).getResultNumber() != cast<OpResult>(b).getResultNumber())
      return false;
    if (kb == Kind::Activation)
      return position.lookup(db) == position.lookup(da) + period;
    // Weights and side computations: the same kind of op and type.
    return da->getName() == db->getName() && a.getType() == b.getType() &&
           (kb == Kind::Side || classes.lookup(da) == classes.lookup(db));
  }

  bool alike(unsigned i, unsigned period) const {
    Operation *a = sequence[i], *b = sequence[i + period];
    if (classes.lookup(a) != classes.lookup(b))
      return false;
    for (auto [x, y] : llvm::zip_equal(a->getOperands(), b->getOperands()))
      if (!alike(x, y, i, period))
        return false;
    return true;
  }

  /// The weights the activations in [begin, end) read.
  SmallVector<Operation *> weightsRead(unsigned begin, unsigned end) const {
    llvm::SetVector<Operation *> weights;
    for (unsigned p = begin; p < end; ++p)
      for (Value v : sequence[p]->getOperands())
        if (Operation *def = v.getDefiningOp(); def && kinds.lookup(def) == Kind::Weight)
          weights.insert(def);
    return weights.takeVector();
  }

  /// Whether the blocks of `run` are layers: each reads weights no other
  /// block reads (by op and by name), and each after the first reads what
  /// the one before it computed.
  bool isStack(const Run &run) const {
    DenseMap<Operation *, unsigned> readers;
    llvm::StringMap<unsigned> names;
    SmallVector<SmallVector<Operation *>> weights;
    for (unsigned k = 0; k < run.count; ++k) {
      unsigned begin = run.start + k * run.period;
      weights.push_back(weightsRead(begin, begin + run.period));
      llvm::StringSet<> blockNames;
      for (Operation *w : weights.back()) {
        ++readers[w];
        if (blockNames.insert(*initializerName(w)).second)
          ++names[*initializerName(w)];
      }
      if (k == 0)
        continue;
      bool chained = false;
      for (unsigned p = begin; p < begin + run.period && !chained; ++p)
        for (Value v : sequence[p]->getOperands()) {
          Operation *def = v.getDefiningOp();
          auto it = def ? position.find(def) : position.end();
          if (it != position.end() && it->second >= begin - run.period && it->second < begin)
            chained = true;
        }
      if (!chained)
        return false;
    }
    return llvm::all_of(weights, [&](ArrayRef<Operation *> ws) {
      return llvm::any_of(
          ws, [&](Operation *w) { return readers[w] == 1 && names[*initializerName(w)] == 1; });
    });
  }

  /// Finds the stacks among the activations in [lo, hi): the run covering
  /// the most ops, then more in what lies before and after it.
  void findRuns(unsigned lo, unsigned hi, SmallVectorImpl<Run> &found) {
    if (hi - lo < 2)
      return;
    // Candidate periods: the distances between consecutive ops of the same
    // class that read a weight.
    DenseMap<unsigned, unsigned> last;
    llvm::SmallSetVector<unsigned, 16> periods;
    for (unsigned p = lo; p < hi; ++p) {
      Operation *op = sequence[p];
      if (llvm::none_of(op->getOperands(), [&](Value v) { return kindOf(v) == Kind::Weight; }))
        continue;
      auto [it, first] = last.try_emplace(classes.lookup(op), p);
      if (!first) {
        periods.insert(p - it->second);
        it->second = p;
      }
    }
    SmallVector<Run> candidates;
    for (unsigned period : periods) {
      for (unsigned i = lo; i + period < hi;) {
        unsigned j = i;
        while (j + period < hi && alike(j, period))
          ++j;
        unsigned length = j - i + period, count = length / period;
        if (j > i && count >= 2) {
          // Where the run leaves slack, cut where the fewest values cross.
          unsigned best = i;
          long bestCost = -1;
          for (unsigned start = i; start + count * period <= i + length; ++start) {
            long cost = 0;
            for (unsigned k = 0; k <= count; ++k)
              cost += crossing[start + k * period];
            if (bestCost < 0 || cost <= bestCost) {
              best = start;
              bestCost = cost;
            }
          }
          candidates.push_back({best, period, count});
        }
        i = j + 1;
      }
    }
    llvm::stable_sort(candidates, [](const Run &a, const Run &b) {
      if (a.period * a.count != b.period * b.count)
        return a.period * a.count > b.period * b.count;
      return a.period < b.period;
    });
    for (const Run &run : candidates) {
      // A longer run may hold shorter ones that are stacks.
      for (Run r = run; r.count >= 2; --r.count) {
        if (!isStack(r))
          continue;
        found.push_back(r);
        findRuns(lo, r.start, found);
        findRuns(r.end(), hi, found);
        return;
      }
    }
  }

  /// For each cut c in the order (before the op at c): how many activations
  /// computed before it are read after it.
  SmallVector<int> crossingCounts() const {
    SmallVector<int> delta(sequence.size() + 2, 0);
    for (auto [p, op] : llvm::enumerate(sequence))
      for (Value r : op->getResults()) {
        unsigned lastUse = p;
        for (Operation *user : r.getUsers())
          if (auto it = position.find(user); it != position.end())
            lastUse = std::max(lastUse, it->second);
          else // the terminator
            lastUse = sequence.size();
        if (lastUse > p) {
          ++delta[p + 1];
          --delta[lastUse + 1];
        }
      }
    SmallVector<int> crossing(sequence.size() + 1, 0);
    int live = 0;
    for (unsigned c = 0; c <= sequence.size(); ++c)
      crossing[c] = live += delta[c];
    return crossing;
  }

  /// Places every op in a region and builds the structure.
  LayerStructure assemble(ArrayRef<Run> runs) {
    // Regions in program order: prologue, each stack's blocks, the ops
    // between stacks, the epilogue.
    SmallVector<Region> regions{{Region::Prologue}};
    SmallVector<unsigned> firstBlock; // per stack, its first block's region
    for (auto [s, run] : llvm::enumerate(runs)) {
      if (s > 0)
        regions.push_back({Region::Between, unsigned(s - 1)});
      firstBlock.push_back(regions.size());
      for (unsigned k = 0; k < run.count; ++k)
        regions.push_back({Region::Block, unsigned(s), k});
    }
    regions.push_back({Region::Epilogue});
    unsigned epilogue = regions.size() - 1;
    DenseMap<Operation *, unsigned> regionOf;
    for (auto [p, op] : llvm::enumerate(sequence)) {
      unsigned r = 0;
      for (auto [s, run] : llvm::enumerate(runs)) {
        if (p < run.start)
          break;
        r = p < run.end() ? firstBlock[s] + (p - run.start) / run.period
                          : firstBlock[s] + run.count; // between, or the epilogue
      }
      regionOf[op] = r;
    }
    // The region before stack s.
    auto before = [&](unsigned s) { return firstBlock[s] - 1; };

    // Weights and side computations: with the one block that reads them,
    // else before the first stack that reads them, else where their first
    // reader is. Side computations stay out of the blocks of a stack whose
    // blocks would not get the same ones.
    SmallVector<bool> pullSide(runs.size(), true);
    for (bool settled = false; !settled;) {
      settled = true;
      for (Operation *op : llvm::reverse(ops)) {
        if (kinds.lookup(op) == Kind::Activation)
          continue;
        std::optional<unsigned> first, only;
        bool one = true;
        for (Operation *user : op->getUsers()) {
          unsigned r = user->hasTrait<OpTrait::IsTerminator>() ? epilogue : regionOf.lookup(user);
          if (first && r != *first)
            one = false;
          first = first ? std::min(*first, r) : r;
        }
        unsigned r = first.value_or(0);
        if (regions[r].kind == Region::Block) {
          unsigned s = regions[r].stack;
          if (!one || (kinds.lookup(op) == Kind::Side && !pullSide[s]))
            r = before(s);
        }
        regionOf[op] = r;
      }
      // Every block of a stack must take the same side computations.
      for (auto [s, run] : llvm::enumerate(runs)) {
        if (!pullSide[s])
          continue;
        SmallVector<SmallVector<unsigned>> pulled(run.count);
        for (Operation *op : ops) {
          unsigned r = regionOf.lookup(op);
          if (kinds.lookup(op) == Kind::Side && regions[r].kind == Region::Block &&
              regions[r].stack == s)
            pulled[regions[r].block].push_back(classes.lookup(op));
        }
        for (auto &classesOfBlock : pulled)
          llvm::sort(classesOfBlock);
        if (!llvm::all_equal(pulled)) {
          pullSide[s] = false;
          settled = false;
        }
      }
    }

    LayerStructure layers;
    layers.stacks.resize(runs.size());
    layers.between.resize(runs.size() - 1);
    for (auto [s, run] : llvm::enumerate(runs))
      layers.stacks[s].blocks.resize(run.count);
    for (Operation *op : ops) {
      const Region &r = regions[regionOf.lookup(op)];
      switch (r.kind) {
      case Region::Prologue:
        layers.prologue.push_back(op);
        break;
      case Region::Between:
        layers.between[r.stack].push_back(op);
        break;
      case Region::Epilogue:
        layers.epilogue.push_back(op);
        break;
      case Region::Block: {
        LayerBlock &block = layers.stacks[r.stack].blocks[r.block];
        block.ops.push_back(op);
        if (kinds.lookup(op) == Kind::Weight &&
            !llvm::is_contained(block.weights, *initializerName(op)))
          block.weights.push_back(initializerName(op)->str());
        break;
      }
      }
    }

    // The values crossing each boundary, and those every block reads.
    for (auto [s, stack] : llvm::enumerate(layers.stacks)) {
      auto blockOf = [&, s = s](Operation *op) -> std::optional<unsigned> {
        auto it = regionOf.find(op);
        if (it == regionOf.end() || regions[it->second].kind != Region::Block ||
            regions[it->second].stack != s)
          return std::nullopt;
        return regions[it->second].block;
      };
      unsigned count = stack.blocks.size();
      for (unsigned k = 0; k + 1 < count; ++k) {
        llvm::SetVector<Value> carried;
        for (unsigned j = 0; j <= k; ++j)
          for (Operation *op : stack.blocks[j].ops)
            for (Value r : op->getResults())
              for (Operation *user : r.getUsers())
                if (std::optional<unsigned> b = blockOf(user); b && *b > k)
                  carried.insert(r);
        stack.carried.push_back(carried.takeVector());
      }
      llvm::MapVector<Value, llvm::SmallDenseSet<unsigned>> readers;
      for (auto [k, block] : llvm::enumerate(stack.blocks))
        for (Operation *op : block.ops)
          for (Value v : op->getOperands()) {
            Operation *def = v.getDefiningOp();
            // Not the blocks' own values, nor scalar constants.
            if (def && (blockOf(def) || regionOf.lookup(def) > before(s) ||
                        (kinds.lookup(def) == Kind::Side && def->getNumOperands() == 0 &&
                         cast<ShapedType>(v.getType()).getNumElements() <= 1)))
              continue;
            readers[v].insert(k);
          }
      for (auto &[v, blocks] : readers)
        if (blocks.size() == count)
          stack.shared.push_back(v);
    }
    return layers;
  }
};

/// The longest prefix of `a` and `b` that ends in '.' ("" if none).
StringRef commonDottedPrefix(StringRef a, StringRef b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n])
    ++n;
  size_t dot = a.take_front(n).rfind('.');
  return dot == StringRef::npos ? StringRef() : a.take_front(dot + 1);
}

/// The dotted prefix that the dotted names of a block share ("" if none):
/// `model.transformer.h.0.`. Names without a dot (`onnx::MatMul_655`) do
/// not count.
StringRef blockPrefix(ArrayAttr names) {
  std::optional<StringRef> prefix;
  for (Attribute a : names) {
    StringRef n = cast<StringAttr>(a).getValue();
    if (n.contains('.'))
      prefix = prefix ? commonDottedPrefix(*prefix, n) : n.take_front(n.rfind('.') + 1);
  }
  return prefix.value_or(StringRef());
}

/// How the report names the weights of the blocks from `first` to `last`:
/// `h.0.* .. h.11.*`, their prefixes less `drop`, when each block's dotted
/// names share one; else the first weight of each and how many more.
std::string describeWeights(ArrayAttr first, ArrayAttr last, size_t drop) {
  StringRef a = blockPrefix(first), b = blockPrefix(last);
  if (!a.empty() && !b.empty() && a != b)
    return (a.drop_front(drop) + "* .. " + b.drop_front(drop) + "*").str();
  auto name = [](ArrayAttr ws) {
    if (ws.empty())
      return std::string("(none)");
    std::string s = cast<StringAttr>(ws[0]).getValue().str();
    if (ws.size() > 1)
      s += " +" + std::to_string(ws.size() - 1);
    return s;
  };
  return name(first) + " .. " + name(last);
}

struct NNFindLayersPass : public nn::impl::NNFindLayersBase<NNFindLayersPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fn = module.lookupSymbol<func::FuncOp>("main");
    if (!fn)
      for (auto f : module.getOps<func::FuncOp>())
        if (!f.isExternal()) {
          fn = f;
          break;
        }
    Builder b(module.getContext());
    FailureOr<LayerStructure> layers = fn ? findLayers(fn) : FailureOr<LayerStructure>(failure());
    int64_t total = 0, prologue = 0, epilogue = 0;
    SmallVector<Attribute> stacks, between;
    if (succeeded(layers)) {
      for (const LayerStack &stack : layers->stacks) {
        SmallVector<Attribute> weights;
        for (const LayerBlock &block : stack.blocks) {
          SmallVector<Attribute> names;
          for (const std::string &name : block.weights)
            names.push_back(b.getStringAttr(name));
          weights.push_back(b.getArrayAttr(names));
        }
        size_t carried = 0;
        for (const auto &values : stack.carried)
          carried = std::max(carried, values.size());
        total += stack.blocks.size();
        stacks.push_back(b.getDictionaryAttr({
            b.getNamedAttr("blocks", b.getI64IntegerAttr(stack.blocks.size())),
            b.getNamedAttr("ops_per_block", b.getI64IntegerAttr(stack.blocks.front().ops.size())),
            b.getNamedAttr("carried", b.getI64IntegerAttr(carried)),
            b.getNamedAttr("shared", b.getI64IntegerAttr(stack.shared.size())),
            b.getNamedAttr("weights", b.getArrayAttr(weights)),
        }));
      }
      for (const auto &ops : layers->between)
        between.push_back(b.getI64IntegerAttr(ops.size()));
      prologue = layers->prologue.size();
      epilogue = layers->epilogue.size();
    } else if (fn && !fn.isExternal()) {
      prologue = fn.getBody().front().getOperations().size() - 1;
    }
    SmallVector<NamedAttribute> fields{
        b.getNamedAttr("blocks", b.getI64IntegerAttr(total)),
        b.getNamedAttr("stacks", b.getArrayAttr(stacks)),
        b.getNamedAttr("prologue_ops", b.getI64IntegerAttr(prologue)),
        b.getNamedAttr("epilogue_ops", b.getI64IntegerAttr(epilogue)),
    };
    if (!between.empty())
      fields.push_back(b.getNamedAttr("between_ops", b.getArrayAttr(between)));
    module->setAttr("nn.layers", b.getDictionaryAttr(fields));
    markAllAnalysesPreserved();
  }
};

} // namespace

FailureOr<LayerStructure> shardflow::nn::findLayers(func::FuncOp fn) {
  return LayerFinder(fn).find();
}

void shardflow::nn::printLayerReport(ModuleOp module, llvm::raw_ostream &os) {
  auto layers = module->getAttrOfType<DictionaryAttr>("nn.layers");
  if (!layers)
    return;
  auto number = [&](DictionaryAttr d, StringRef key) {
    auto i = d.getAs<IntegerAttr>(key);
    return i ? i.getInt() : 0;
  };
  auto stacks = layers.getAs<ArrayAttr>("stacks");
  if (!stacks || stacks.empty()) {
    os << "layers: no repeated blocks\n";
    return;
  }
  // The weights' prefixes less the leading parts all of them share: but
  // for the last when there is one stack (`model.transformer.h.0.` and
  // `model.transformer.h.11.` print as `h.0.*` and `h.11.*`), all of them
  // when stacks differ right after (`encoder.`, `decoder.`).
  std::optional<StringRef> common;
  for (Attribute a : stacks) {
    auto weights = cast<DictionaryAttr>(a).getAs<ArrayAttr>("weights");
    for (Attribute block : {weights[0], weights[weights.size() - 1]}) {
      StringRef p = blockPrefix(cast<ArrayAttr>(block));
      if (!p.empty())
        common = common ? commonDottedPrefix(*common, p) : p;
    }
  }
  size_t drop = 0;
  if (common && stacks.size() > 1) {
    drop = common->size();
  } else if (common && !common->empty()) {
    size_t dot = common->drop_back().rfind('.');
    drop = dot == StringRef::npos ? 0 : dot + 1;
  }
  auto ops = [](int64_t n) { return std::to_string(n) + (n == 1 ? " op" : " ops"); };
  auto between = layers.getAs<ArrayAttr>("between_ops");
  os << "layers: ";
  for (auto [s, a] : llvm::enumerate(stacks)) {
    auto stack = cast<DictionaryAttr>(a);
    auto weights = stack.getAs<ArrayAttr>("weights");
    int64_t carried = number(stack, "carried");
    if (s > 0)
      os << ", then ";
    os << number(stack, "blocks") << " blocks of " << ops(number(stack, "ops_per_block"))
       << " (weights "
       << describeWeights(cast<ArrayAttr>(weights[0]), cast<ArrayAttr>(weights[weights.size() - 1]),
                          drop)
       << "; " << carried << " carried value" << (carried == 1 ? "" : "s") << ", "
       << number(stack, "shared") << " shared)";
  }
  os << ", prologue " << ops(number(layers, "prologue_ops"));
  if (between)
    for (Attribute a : between)
      os << ", " << ops(cast<IntegerAttr>(a).getInt()) << " between";
  os << ", epilogue " << ops(number(layers, "epilogue_ops")) << "\n";
}
