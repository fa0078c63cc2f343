//===- StandinPtx.cpp - a PTX interpreter for the stand-in driver ---------===//
//
// Parsing: the text is cut into tokens, module directives are read, and
// each .entry's body is decoded into instructions with registers numbered,
// labels and symbols (parameters, shared variables) resolved. Anything the
// interpreter does not know makes that kernel's `problem`.
//
// Running: each block gets its shared memory and one register file per
// thread. Threads run one at a time until they reach bar.sync, shfl.sync
// or ret; a warp's shuffle happens when all its lanes named in the mask
// are there, a barrier opens when every live thread of the block is. The
// arithmetic follows the PTX ISA: f32/f64 in their own precision (directed
// rounding through the host's rounding mode), f16/bf16 computed in double
// and rounded once to f32, then to the type; the approximate functions
// (ex2, rsqrt, ...) use the host's exact ones.
//
//===----------------------------------------------------------------------===//

#include "StandinPtx.h"

#include "shardflow/Runtime/Format/FloatConversion.h"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

using namespace shardflow::standin::ptx;
using shardflow::runtime::bf16BitsToFloat;
using shardflow::runtime::bitsToFloat;
using shardflow::runtime::floatToBf16Bits;
using shardflow::runtime::floatToBits;
using shardflow::runtime::floatToHalfBits;
using shardflow::runtime::halfBitsToFloat;

namespace {

//===----------------------------------------------------------------------===//
// Instructions
//===----------------------------------------------------------------------===//

enum class T : uint8_t {
  None,
  Pred,
  B8,
  B16,
  B32,
  B64,
  U8,
  U16,
  U32,
  U64,
  S8,
  S16,
  S32,
  S64,
  F16,
  F16x2,
  BF16,
  BF16x2,
  F32,
  F64
};

int bitsOf(T t) {
  switch (t) {
  case T::Pred:
    return 1;
  case T::B8:
  case T::U8:
  case T::S8:
    return 8;
  case T::B16:
  case T::U16:
  case T::S16:
  case T::F16:
  case T::BF16:
    return 16;
  case T::B32:
  case T::U32:
  case T::S32:
  case T::F32:
  case T::F16x2:
  case T::BF16x2:
    return 32;
  case T::B64:
  case T::U64:
  case T::S64:
  case T::F64:
    return 64;
  case T::None:
    return 64;
  }
  return 64;
}
bool isSigned(T t) {
  return t == T::S8 || t == T::S16 || t == T::S32 || t == T::S64;
}
bool isFloat(T t) {
  return t == T::F16 || t == T::BF16 || t == T::F32 || t == T::F64;
}

T typeNamed(const std::string &s) {
  static const std::unordered_map<std::string, T> names = {
      {"pred", T::Pred}, {"b8", T::B8},         {"b16", T::B16},
      {"b32", T::B32},   {"b64", T::B64},       {"u8", T::U8},
      {"u16", T::U16},   {"u32", T::U32},       {"u64", T::U64},
      {"s8", T::S8},     {"s16", T::S16},       {"s32", T::S32},
      {"s64", T::S64},   {"f16", T::F16},       {"f16x2", T::F16x2},
      {"bf16", T::BF16}, {"bf16x2", T::BF16x2}, {"f32", T::F32},
      {"f64", T::F64}};
  auto it = names.find(s);
  return it == names.end() ? T::None : it->second;
}

enum class Op : uint8_t {
  Mov,
  Add,
  Sub,
  Mul,
  Mad,
  Fma,
  Div,
  Rem,
  Min,
  Max,
  Abs,
  Neg,
  And,
  Or,
  Xor,
  Not,
  CNot,
  Shl,
  Shr,
  Shf, // funnel shift of two 32-bit words
  Setp,
  Selp,
  Cvt,
  Cvta,
  Ld,
  St,
  Bra,
  Ret,
  Bar,
  Shfl,
  Rcp,
  Sqrt,
  Rsqrt,
  Ex2,
  Lg2,
  Sin,
  Cos,
  Tanh,
  Copysign,
  Bfe,
  Bfi,
  Popc,
  Clz,
  Brev,
  Prmt,
  Atom,
  Nop,
  Label,
  Call // while parsing only: calls are inlined, labels become branch targets
};

enum class Rnd : uint8_t { None, Rn, Rz, Rm, Rp, Rni, Rzi, Rmi, Rpi };
enum class Space : uint8_t { Generic, Global, Shared, Param, Local };
enum class Cmp : uint8_t {
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  Equ,
  Neu,
  Ltu,
  Leu,
  Gtu,
  Geu,
  Num,
  Nan
};
enum class BoolOp : uint8_t { None, And, Or, Xor };
enum class Part : uint8_t { None, Lo, Hi, Wide }; // mul/mad
enum class Shuffle : uint8_t { Up, Down, Bfly, Idx };
enum class AtomOp : uint8_t {
  Add,
  Min,
  Max,
  And,
  Or,
  Xor,
  Exch,
  Cas,
  Inc,
  Dec
};

// Special registers.
enum Special : int {
  TidX,
  TidY,
  TidZ,
  NtidX,
  NtidY,
  NtidZ,
  CtaidX,
  CtaidY,
  CtaidZ,
  NctaidX,
  NctaidY,
  NctaidZ,
  LaneId,
  WarpId,
  NWarpId,
  DynamicSmem
};

struct Operand {
  enum Kind : uint8_t {
    None,
    Reg,
    Imm,
    Special,
    Addr,
    Vec,
    Sink,
    Pair,
    Symbol
  } kind = None;
  bool neg = false;      // !%p
  int reg = -1;          // Reg; Addr base (-1: none); Pair first
  int reg2 = -1;         // Pair second
  int64_t imm = 0;       // Imm bits, Addr offset, Special code
  std::vector<int> regs; // Vec (-1: sink, kVecImm: the immediate in imms)
  std::vector<int64_t> imms; // Vec: the elements' immediates
  std::string symbol;    // Symbol, or Addr on a symbol, until resolved
};

/// A vector operand's element that is an immediate (st.v2 [a], {0, 0}).
constexpr int kVecImm = -2;

struct Inst {
  Op op = Op::Nop;
  T type = T::None, from = T::None; // cvt: type is the destination
  Rnd rnd = Rnd::None;
  bool ftz = false, sat = false, nan = false;
  // Extended-precision integer arithmetic: .cc writes the carry flag,
  // madc/addc read it (libdevice's trig reduction multiplies 96-bit words).
  bool carryOut = false, carryIn = false;
  // shf: .l (else .r) and .wrap (else .clamp).
  bool shiftLeft = false, shiftWrap = false;
  Part part = Part::None;
  Cmp cmp = Cmp::Eq;
  BoolOp bop = BoolOp::None;
  Space space = Space::Generic;
  bool toGeneric = true; // cvta: .to.<space> is false
  Shuffle shuffle = Shuffle::Bfly;
  AtomOp atom = AtomOp::Add;
  bool atomReturns = true; // red: false
  uint8_t vec = 1;
  int guard = -1;
  bool guardNeg = false;
  int target = -1; // bra
  std::vector<Operand> o;
  int line = 0;
  std::string text;   // the source; a Label's name
  std::string callee; // Call
  std::vector<int> callArgs,
      callRets; // Call: registers of the .param variables
};

} // namespace

struct shardflow::standin::ptx::Program {
  std::vector<Inst> code;
  int registers = 0;
};

namespace {

constexpr uint64_t kSharedWindow = uint64_t(1)
                                   << 56; // generic addresses of shared memory
constexpr uint64_t kWindowMask = ~((uint64_t(1) << 56) - 1);
// Generic addresses of a thread's local memory (each thread reaches its own).
constexpr uint64_t kLocalWindow = uint64_t(2) << 56;

//===----------------------------------------------------------------------===//
// Lexing and parsing
//===----------------------------------------------------------------------===//

struct Token {
  std::string text;
  int line;
};

bool identChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
         c == '%' || c == '$';
}

/// Arithmetic the interpreter runs on f16x2/bf16x2 registers: the scalar
/// operation on each 16-bit half.
bool packedArithmetic(Op op) {
  return op == Op::Add || op == Op::Sub || op == Op::Mul || op == Op::Fma ||
         op == Op::Min || op == Op::Max || op == Op::Neg || op == Op::Abs;
}

std::vector<Token> lex(const std::string &s) {
  std::vector<Token> out;
  int line = 1;
  size_t i = 0, n = s.size();
  while (i < n) {
    char c = s[i];
    if (c == '\n') {
      ++line;
      ++i;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n')
        ++i;
    } else if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      i += 2;
      while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/'))
        line += s[i++] == '\n';
      i += 2;
    } else if (c == '"') {
      size_t j = s.find('"', i + 1);
      j = j == std::string::npos ? n : j + 1;
      out.push_back({s.substr(i, j - i), line});
      i = j;
    } else if (identChar(c)) {
      size_t j = i;
      while (j < n && (identChar(s[j]) ||
                       (s[j] == ':' && j + 1 < n && s[j + 1] == ':'))) {
        if (s[j] == ':')
          ++j; // "::" of cache hints
        ++j;
      }
      out.push_back({s.substr(i, j - i), line});
      i = j;
    } else {
      out.push_back({std::string(1, c), line});
      ++i;
    }
  }
  return out;
}

bool parseInteger(const std::string &s, int64_t &value) {
  if (s.empty())
    return false;
  const char *p = s.c_str();
  char *end = nullptr;
  errno = 0;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    value = int64_t(std::strtoull(p + 2, &end, 16));
  else if (std::isdigit(static_cast<unsigned char>(s[0])))
    value = int64_t(std::strtoull(p, &end, 10));
  else
    return false;
  if (*end == 'U' || *end == 'u')
    ++end;
  return *end == 0 && errno == 0;
}

/// 0fXXXXXXXX (f32 bits), 0dXXXXXXXXXXXXXXXX (f64 bits) or an integer.
bool parseNumber(const std::string &s, int64_t &bits) {
  if (s.size() == 10 && s[0] == '0' && (s[1] == 'f' || s[1] == 'F')) {
    bits = int64_t(std::strtoull(s.c_str() + 2, nullptr, 16));
    return true;
  }
  if (s.size() == 18 && s[0] == '0' && (s[1] == 'd' || s[1] == 'D')) {
    bits = int64_t(std::strtoull(s.c_str() + 2, nullptr, 16));
    return true;
  }
  return parseInteger(s, bits);
}

struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct SharedVar {
  size_t bytes = 0, align = 1;
  bool dynamic = false; // .extern .shared x[]
};

class Parser {
public:
  explicit Parser(const std::string &text) : toks(lex(text)) {
    std::stringstream ss(text);
    for (std::string l; std::getline(ss, l);)
      source.push_back(l);
  }

  std::unique_ptr<Module> module() {
    auto m = std::make_unique<Module>();
    try {
      while (i < toks.size()) {
        const std::string t = peek();
        if (t == ".version" || t == ".target" || t == ".address_size") {
          int line = toks[i].line;
          while (i < toks.size() && toks[i].line == line)
            ++i;
          continue;
        }
        bool external = false;
        while (peek() == ".visible" || peek() == ".extern" ||
               peek() == ".weak" || peek() == ".common") {
          external |= peek() == ".extern";
          ++i;
        }
        const std::string &what = peek();
        if (what == ".entry" || what == ".func") {
          ++i;
          KernelState ks = kernel(what == ".func");
          if (what == ".entry")
            entries.push_back(std::move(ks));
          else if (ks.defined)
            functions[ks.k.name] = std::move(ks);
        } else if (what == ".shared") {
          ++i;
          std::string name;
          SharedVar v = variable(name, external);
          moduleShared[name] = v;
        } else if (what == ".global" || what == ".const") {
          ++i;
          moduleGlobal(); // one it cannot read: its users fail on the symbol
        } else {
          throw ParseError("line " + std::to_string(line()) + ": unexpected '" +
                           what + "'");
        }
      }
    } catch (const ParseError &e) {
      m->problem = e.what();
    }
    for (KernelState &ks : entries) {
      if (ks.k.problem.empty())
        inlineCalls(ks);
      if (ks.k.problem.empty())
        resolve(ks);
      if (ks.k.problem.empty())
        ks.k.program = std::make_shared<const Program>(std::move(ks.program));
      std::string name = ks.k.name;
      m->kernels[name] = std::move(ks.k);
    }
    return m;
  }

private:
  std::vector<Token> toks;
  std::vector<std::string> source; // the text's lines, for messages

  /// Line `n` (from 1) as the instruction's text: no comment, no final
  /// ';', whitespace runs as one space.
  std::string sourceLine(int n) const {
    if (n < 1 || size_t(n) > source.size())
      return "";
    std::string l = source[size_t(n) - 1], out;
    l = l.substr(0, l.find("//"));
    for (char c : l) {
      if (std::isspace(static_cast<unsigned char>(c))) {
        if (!out.empty() && out.back() != ' ')
          out += ' ';
      } else {
        out += c;
      }
    }
    while (!out.empty() && (out.back() == ' ' || out.back() == ';'))
      out.pop_back();
    return out;
  }
  size_t i = 0;
  std::map<std::string, SharedVar> moduleShared;
  // Module-scope .global/.const arrays, initialized as declared.
  std::map<std::string, std::shared_ptr<const std::vector<uint8_t>>> moduleGlobals;

  /// [.align N] .bK|.uK|.sK name[N] [= {v, ...}] ; after .global or .const.
  /// Anything else is skipped (kernels that use it fail on the symbol).
  void moduleGlobal() {
    size_t start = i;
    auto skip = [&] {
      i = start;
      while (i < toks.size() && peek() != ";")
        ++i;
      ++i;
    };
    if (peek() == ".align") {
      ++i;
      std::string a = next();
      int64_t ignored;
      if (!parseInteger(a, ignored))
        return skip();
    }
    std::string type = next();
    T ty = type.size() > 1 ? typeNamed(type.substr(1)) : T::None;
    if (ty == T::None || ty == T::Pred || ty == T::F32 || ty == T::F64)
      return skip();
    size_t width = size_t(bitsOf(ty) / 8);
    std::string name = next();
    int64_t count = 1;
    if (peek() == "[") {
      ++i;
      std::string n = next();
      if (!parseInteger(n, count) || count < 0 || count > (int64_t(1) << 20) || next() != "]")
        return skip();
    }
    auto data = std::make_shared<std::vector<uint8_t>>(size_t(count) * width, 0);
    if (peek() == "=") {
      ++i;
      if (next() != "{")
        return skip();
      for (int64_t k = 0; peek() != "}"; ++k) {
        std::string v = next();
        int64_t x;
        if (k >= count || !parseInteger(v, x))
          return skip();
        for (size_t byte = 0; byte < width; ++byte)
          (*data)[size_t(k) * width + byte] = uint8_t(uint64_t(x) >> (8 * byte));
        if (peek() == ",")
          ++i;
      }
      ++i; // }
    }
    if (next() != ";")
      return skip();
    moduleGlobals[name] = data;
  }

  const std::string &peek() const {
    static const std::string end;
    return i < toks.size() ? toks[i].text : end;
  }
  int line() const {
    return i < toks.size() ? toks[i].line
                           : (toks.empty() ? 0 : toks.back().line);
  }
  std::string next() {
    if (i >= toks.size())
      throw ParseError("unexpected end of the PTX text");
    return toks[i++].text;
  }
  void expect(const std::string &what) {
    int l = line();
    std::string got = next();
    if (got != what)
      throw ParseError("line " + std::to_string(l) + ": expected '" + what +
                       "', found '" + got + "'");
  }
  int64_t integer() {
    int l = line();
    std::string s = next();
    int64_t v;
    if (!parseInteger(s, v))
      throw ParseError("line " + std::to_string(l) +
                       ": expected a number, found '" + s + "'");
    return v;
  }

  /// [.align N] .type name ([N])* ; after the state space.
  SharedVar variable(std::string &name, bool external) {
    SharedVar v;
    size_t elem = 0;
    for (;;) {
      std::string t = next();
      if (t == ".align") {
        v.align = size_t(integer());
      } else if (!t.empty() && t[0] == '.') {
        T ty = typeNamed(t.substr(1));
        if (ty == T::None || ty == T::Pred)
          throw ParseError("line " + std::to_string(line()) +
                           ": unknown variable type " + t);
        elem = size_t(bitsOf(ty) / 8);
      } else {
        name = t;
        break;
      }
    }
    v.bytes = elem;
    while (peek() == "[") {
      ++i;
      if (peek() == "]") {
        v.dynamic = true;
        v.bytes = 0;
      } else {
        v.bytes *= size_t(integer());
      }
      expect("]");
    }
    if (peek() == "=")
      throw ParseError("line " + std::to_string(line()) + ": shared variable " +
                       name + " has an initializer");
    expect(";");
    (void)external;
    return v;
  }

  // --- kernels ------------------------------------------------------------

  struct KernelState {
    Kernel k;
    Program program;
    std::vector<std::unordered_map<std::string, int>> scopes;
    std::map<std::string, SharedVar> localShared;
    // .local variables (libdevice's trig reduction keeps a few words there).
    std::map<std::string, SharedVar> localVars;
    // .param variables held in registers: a function's parameters and
    // return values, and the arguments a body passes to calls.
    std::unordered_map<std::string, int> paramRegs;
    std::vector<int> paramOrder, returnRegs; // a function's
    bool defined = true;                     // false: a .func declaration
  };

  std::vector<KernelState> entries;
  std::map<std::string, KernelState> functions;
  int inlined = 0; // calls inlined so far, for unique labels

  std::vector<Parameter> parameterList(size_t &offset) {
    std::vector<Parameter> out;
    expect("(");
    while (peek() != ")") {
      expect(".param");
      size_t bytes = 0, align = 0, count = 1;
      bool pointer = false; // .ptr .align N: the pointee's alignment
      std::string name;
      while (peek() != "," && peek() != ")") {
        std::string t = next();
        if (t == ".align") {
          align = size_t(integer());
        } else if (t == ".ptr" || t == ".global" || t == ".shared" ||
                   t == ".const" || t == ".local") {
          pointer |= t == ".ptr";
        } else if (!t.empty() && t[0] == '.') {
          T ty = typeNamed(t.substr(1));
          if (ty == T::None || ty == T::Pred)
            throw ParseError("line " + std::to_string(line()) +
                             ": parameter type " + t);
          bytes = size_t(bitsOf(ty) / 8);
        } else if (t == "[") {
          count *= size_t(integer());
          expect("]");
        } else {
          name = t;
        }
      }
      if (peek() == ",")
        ++i;
      size_t total = bytes * count;
      size_t a = std::max<size_t>(std::max(bytes, pointer ? 1 : align), 1);
      offset = (offset + a - 1) / a * a;
      out.push_back({name, offset, total});
      offset += total;
    }
    expect(")");
    return out;
  }

  /// After .entry or .func: the header, and the body when there is one.
  KernelState kernel(bool function) {
    KernelState ks;
    ks.scopes.emplace_back();
    std::vector<Parameter> returns;
    size_t offset = 0;
    if (function && peek() == "(")
      returns = parameterList(offset);
    ks.k.name = next();
    offset = 0;
    if (peek() == "(")
      ks.k.parameters = parameterList(offset);
    ks.k.parameterBytes = offset;
    if (function) {
      auto scalar = [&](const Parameter &p, std::vector<int> &regs) {
        if (p.bytes == 0 || p.bytes > 8)
          ks.k.problem = "function " + ks.k.name + ": parameter " + p.name +
                         " is not a scalar (the stand-in passes scalars)";
        regs.push_back(ks.program.registers);
        ks.paramRegs[p.name] = ks.program.registers++;
      };
      for (const Parameter &p : ks.k.parameters)
        scalar(p, ks.paramOrder);
      for (const Parameter &p : returns)
        scalar(p, ks.returnRegs);
    }
    while (peek() != "{" && peek() != ";") {
      std::string d = next();
      if (d == ".maxntid" || d == ".reqntid") {
        ks.k.exactThreads = d == ".reqntid";
        for (int dim = 0; dim < 3; ++dim) {
          ks.k.maxThreads[dim] = unsigned(integer());
          if (peek() != ",")
            break;
          ++i;
        }
        for (unsigned &m : ks.k.maxThreads)
          m = m ? m : 1;
      } else if (d == ".minnctapersm" || d == ".maxnreg" ||
                 d == ".maxnctapersm") {
        integer();
      } else if (d == ".noreturn") {
      } else {
        throw ParseError("line " + std::to_string(line()) +
                         ": unknown kernel directive " + d);
      }
    }
    if (next() == ";") {
      ks.defined = false;
      return ks;
    }
    ks.scopes.emplace_back();
    body(ks);
    return ks;
  }

  /// An ld.param/st.param of a .param variable held in a register becomes a
  /// mov. Resolved as it is read: each call sequence declares its param0 or
  /// retval0 again, so the register is the one declared last so far.
  void lowerParam(const KernelState &ks, const std::vector<Token> &s,
                  Inst &in) const {
    if ((in.op != Op::Ld && in.op != Op::St) || in.space != Space::Param)
      return;
    Operand &address = in.o[in.op == Op::Ld ? 1 : 0];
    auto it = ks.paramRegs.find(address.symbol);
    if (address.symbol.empty() || it == ks.paramRegs.end())
      return; // a kernel parameter, read from the launch's buffer
    if (address.imm != 0 || address.reg >= 0 || in.vec != 1)
      unsupported(s, "a .param variable is accessed in parts");
    Operand r;
    r.kind = Operand::Reg;
    r.reg = it->second;
    address = r; // ld: mov value, param; st: mov param, value
    in.op = Op::Mov;
    in.space = Space::Generic;
    if (isSigned(in.type) || bitsOf(in.type) < 32)
      in.type = bitsOf(in.type) <= 32 ? T::B32 : T::B64; // widened as ld does
  }

  static void renumber(Inst &in, int base) {
    if (in.guard >= 0)
      in.guard += base;
    for (Operand &o : in.o) {
      if (o.reg >= 0)
        o.reg += base;
      if (o.reg2 >= 0)
        o.reg2 += base;
      for (int &r : o.regs)
        r = r >= 0 ? r + base : r;
    }
    for (int &r : in.callArgs)
      r += base;
    for (int &r : in.callRets)
      r += base;
  }

  static Inst move(int to, int from, const Inst &call) {
    Inst m;
    m.op = Op::Mov;
    m.type = T::B64;
    m.line = call.line;
    m.text = call.text;
    Operand d, s;
    d.kind = s.kind = Operand::Reg;
    d.reg = to;
    s.reg = from;
    m.o = {d, s};
    return m;
  }

  /// Appends `call`'s function body to `out`, its registers after the
  /// caller's, arguments and results moved through the .param registers.
  bool inlineCall(KernelState &ks, const Inst &call, std::vector<Inst> &out,
                  int depth) {
    auto fail = [&](const std::string &why) {
      ks.k.problem =
          "line " + std::to_string(call.line) + " (" + call.text + "): " + why;
      return false;
    };
    auto it = functions.find(call.callee);
    if (it == functions.end())
      return fail("no body for function " + call.callee);
    const KernelState &f = it->second;
    if (!f.k.problem.empty())
      return fail(f.k.problem);
    if (depth > 16)
      return fail("calls nest too deeply (recursion?)");
    if (call.callArgs.size() != f.paramOrder.size() ||
        call.callRets.size() != f.returnRegs.size())
      return fail("the call's arguments do not match " + call.callee);
    int base = ks.program.registers;
    ks.program.registers += f.program.registers;
    std::string prefix = "$inline" + std::to_string(inlined++) + "$";
    for (size_t a = 0; a < call.callArgs.size(); ++a)
      out.push_back(move(f.paramOrder[a] + base, call.callArgs[a], call));
    // The callee's local variables become the caller's, renamed.
    for (const auto &[name, v] : f.localVars)
      ks.localVars[prefix + name] = v;
    for (Inst in : f.program.code) {
      renumber(in, base);
      for (Operand &o : in.o)
        if (!o.symbol.empty() && in.op != Op::Bra && f.localVars.count(o.symbol))
          o.symbol = prefix + o.symbol;
      if (in.op == Op::Label) {
        in.text = prefix + in.text;
      } else if (in.op == Op::Bra) {
        in.o[0].symbol = prefix + in.o[0].symbol;
      } else if (in.op == Op::Ret) {
        in.op = Op::Bra;
        Operand target;
        target.kind = Operand::Symbol;
        target.symbol = prefix + "return";
        in.o = {target};
      }
      if (in.op == Op::Call) {
        if (!inlineCall(ks, in, out, depth + 1))
          return false;
        continue;
      }
      out.push_back(std::move(in));
    }
    Inst end;
    end.op = Op::Label;
    end.text = prefix + "return";
    out.push_back(end);
    for (size_t r = 0; r < call.callRets.size(); ++r)
      out.push_back(move(call.callRets[r], f.returnRegs[r] + base, call));
    return true;
  }

  void inlineCalls(KernelState &ks) {
    bool any = false;
    for (const Inst &in : ks.program.code)
      any |= in.op == Op::Call;
    if (!any)
      return;
    std::vector<Inst> out;
    for (Inst &in : ks.program.code) {
      if (in.op != Op::Call) {
        out.push_back(std::move(in));
        continue;
      }
      if (in.guard >= 0)
        return void(ks.k.problem = "line " + std::to_string(in.line) +
                                   ": a guarded call is not interpreted");
      if (!inlineCall(ks, in, out, 0))
        return;
    }
    ks.program.code = std::move(out);
  }

  void body(KernelState &ks) {
    int depth = 1;
    while (depth > 0) {
      int l = line();
      const std::string t = next();
      if (t == "{") {
        ++depth;
        ks.scopes.emplace_back();
        continue;
      }
      if (t == "}") {
        --depth;
        ks.scopes.pop_back();
        continue;
      }
      if (peek() == ":" && t[0] != '.' && t[0] != '%' && t != "@") {
        ++i;
        Inst label;
        label.op = Op::Label;
        label.text = t;
        label.line = l;
        ks.program.code.push_back(std::move(label));
        continue;
      }
      std::vector<Token> stmt{{t, l}};
      while (peek() != ";")
        stmt.push_back(toks[i++]);
      ++i;
      if (!ks.k.problem.empty())
        continue; // keep reading to the kernel's end
      try {
        statement(ks, stmt);
      } catch (const ParseError &e) {
        ks.k.problem = e.what();
      }
    }
  }

  [[noreturn]] void unsupported(const std::vector<Token> &s,
                                const std::string &why) const {
    throw ParseError("line " + std::to_string(s[0].line) + " (" +
                     sourceLine(s[0].line) + "): " + why);
  }

  void statement(KernelState &ks, const std::vector<Token> &s) {
    const std::string &head = s[0].text;
    if (head == ".reg") {
      declareRegisters(ks, s);
      return;
    }
    if (head == ".pragma" || head == ".loc" || head == ".file")
      return;
    if (head == ".shared" || head == ".local") {
      size_t save = i;
      std::vector<Token> saved;
      saved.swap(toks);
      toks.assign(s.begin() + 1, s.end());
      toks.push_back({";", s[0].line});
      i = 0;
      std::string name;
      SharedVar v;
      try {
        v = variable(name, false);
      } catch (...) {
        toks.swap(saved);
        i = save;
        throw;
      }
      toks.swap(saved);
      i = save;
      if (head == ".local") {
        if (v.dynamic)
          unsupported(s, "a .local variable has no size");
        ks.localVars[name] = v;
      } else {
        ks.localShared[name] = v;
      }
      return;
    }
    if (head ==
        ".param") { // an argument or result of a call, held in a register
      if (s.size() != 3 || s[1].text[0] != '.' ||
          typeNamed(s[1].text.substr(1)) == T::None)
        unsupported(s, "only scalar .param variables are interpreted");
      ks.paramRegs[s[2].text] = ks.program.registers++;
      return;
    }
    if (head[0] == '.')
      unsupported(s, "the stand-in does not model '" + head + "' declarations");
    if (head.rfind("call", 0) == 0 ||
        (s.size() > 2 && s[0].text == "@" &&
         s[s[1].text == "!" ? 3 : 2].text.rfind("call", 0) == 0)) {
      callInstruction(ks, s);
      return;
    }
    instruction(ks, s);
  }

  void declareRegisters(KernelState &ks, const std::vector<Token> &s) {
    size_t j = 1;
    while (j < s.size() && s[j].text[0] == '.')
      ++j; // types
    while (j < s.size()) {
      std::string name = s[j++].text;
      if (j < s.size() && s[j].text == "<") {
        int64_t count;
        if (j + 2 >= s.size() || !parseInteger(s[j + 1].text, count) ||
            s[j + 2].text != ">")
          unsupported(s, "malformed register declaration");
        for (int64_t r = 0; r < count; ++r)
          ks.scopes.back()[name + std::to_string(r)] = ks.program.registers++;
        j += 3;
      } else {
        ks.scopes.back()[name] = ks.program.registers++;
      }
      if (j < s.size() && s[j].text == ",")
        ++j;
    }
  }

  static int special(const std::string &name) {
    static const std::unordered_map<std::string, int> names = {
        {"%tid.x", TidX},       {"%tid.y", TidY},
        {"%tid.z", TidZ},       {"%ntid.x", NtidX},
        {"%ntid.y", NtidY},     {"%ntid.z", NtidZ},
        {"%ctaid.x", CtaidX},   {"%ctaid.y", CtaidY},
        {"%ctaid.z", CtaidZ},   {"%nctaid.x", NctaidX},
        {"%nctaid.y", NctaidY}, {"%nctaid.z", NctaidZ},
        {"%laneid", LaneId},    {"%warpid", WarpId},
        {"%nwarpid", NWarpId},  {"%dynamic_smem_size", DynamicSmem}};
    auto it = names.find(name);
    return it == names.end() ? -1 : it->second;
  }

  static int findReg(const KernelState &ks, const std::string &name) {
    for (auto it = ks.scopes.rbegin(); it != ks.scopes.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end())
        return f->second;
    }
    return -1;
  }

  int reg(KernelState &ks, const std::vector<Token> &s,
          const std::string &name) {
    int r = findReg(ks, name);
    if (r < 0)
      unsupported(s, "register " + name + " is not declared");
    return r;
  }

  Operand operand(KernelState &ks, const std::vector<Token> &s, size_t b,
                  size_t e) {
    Operand o;
    if (b >= e)
      unsupported(s, "an operand is missing");
    const std::string &t = s[b].text;
    if (t == "[") {
      if (s[e - 1].text != "]")
        unsupported(s, "malformed address");
      o.kind = Operand::Addr;
      size_t j = b + 1;
      const std::string &base = s[j].text;
      int64_t v;
      if (base[0] == '%' || findReg(ks, base) >= 0) {
        o.reg = reg(ks, s, base);
        ++j;
      } else if (parseNumber(base, v)) {
        o.imm = v;
        ++j;
      } else {
        o.symbol = base;
        ++j;
      }
      if (j < e - 1) {
        if (s[j].text != "+" && s[j].text != "-")
          unsupported(s, "malformed address");
        bool minus = s[j].text == "-";
        ++j;
        if (s[j].text == "-") {
          minus = !minus;
          ++j;
        }
        if (!parseNumber(s[j].text, v) || j + 1 != e - 1)
          unsupported(s, "malformed address offset");
        o.imm += minus ? -v : v;
      }
      return o;
    }
    if (t == "{") {
      o.kind = Operand::Vec;
      for (size_t j = b + 1; j < e - 1; ++j) {
        if (s[j].text == ",")
          continue;
        int64_t v = 0;
        bool negative = s[j].text == "-" && j + 1 < e - 1;
        if (negative)
          ++j;
        if (s[j].text != "_" && s[j].text[0] != '%' &&
            parseNumber(s[j].text, v)) {
          o.regs.push_back(kVecImm);
          o.imms.push_back(negative ? -v : v);
          continue;
        }
        if (negative)
          unsupported(s, "malformed negative number");
        o.regs.push_back(s[j].text == "_" ? -1 : reg(ks, s, s[j].text));
        o.imms.push_back(0);
      }
      return o;
    }
    if (t == "_" && e == b + 1) {
      o.kind = Operand::Sink;
      return o;
    }
    if (t == "!") {
      o = operand(ks, s, b + 1, e);
      if (o.kind != Operand::Reg)
        unsupported(s, "'!' applies to a predicate register");
      o.neg = true;
      return o;
    }
    if (t == "-") {
      int64_t v;
      if (e != b + 2 || !parseNumber(s[b + 1].text, v))
        unsupported(s, "malformed negative number");
      o.kind = Operand::Imm;
      o.imm = -v;
      return o;
    }
    if (t[0] == '%') {
      if (e == b + 3 && s[b + 1].text == "|") {
        o.kind = Operand::Pair;
        o.reg = reg(ks, s, t);
        o.reg2 = reg(ks, s, s[b + 2].text);
        return o;
      }
      if (e != b + 1)
        unsupported(s, "malformed operand");
      int sp = special(t);
      if (sp >= 0) {
        o.kind = Operand::Special;
        o.imm = sp;
        return o;
      }
      o.kind = Operand::Reg;
      o.reg = reg(ks, s, t);
      return o;
    }
    int64_t v;
    if (e == b + 1 && parseNumber(t, v)) {
      o.kind = Operand::Imm;
      o.imm = v;
      return o;
    }
    if (e == b + 1 && findReg(ks, t) >= 0) { // a register named without '%'
      o.kind = Operand::Reg;
      o.reg = findReg(ks, t);
      return o;
    }
    if (e == b + 1) {
      o.kind = Operand::Symbol;
      o.symbol = t;
      return o;
    }
    unsupported(s, "malformed operand");
  }

  /// call[.uni] (r...), name, (a...); with .param variables as r and a.
  void callInstruction(KernelState &ks, const std::vector<Token> &s) {
    Inst in;
    in.op = Op::Call;
    in.line = s[0].line;
    size_t j = 0;
    if (s[0].text == "@")
      unsupported(s, "a guarded call is not interpreted");
    if (s[0].text != "call" && s[0].text != "call.uni")
      unsupported(s, "only call and call.uni are interpreted");
    in.text = sourceLine(in.line);
    ++j;
    auto list = [&](std::vector<int> &regs) {
      ++j; // (
      while (j < s.size() && s[j].text != ")") {
        if (s[j].text != ",") {
          auto it = ks.paramRegs.find(s[j].text);
          if (it == ks.paramRegs.end())
            unsupported(s, s[j].text + " is not a .param variable");
          regs.push_back(it->second);
        }
        ++j;
      }
      if (j >= s.size())
        unsupported(s, "malformed call");
      ++j; // )
    };
    if (j < s.size() && s[j].text == "(") {
      list(in.callRets);
      if (j >= s.size() || s[j].text != ",")
        unsupported(s, "malformed call");
      ++j;
    }
    if (j >= s.size())
      unsupported(s, "malformed call");
    in.callee = s[j++].text;
    if (j < s.size()) {
      if (s[j].text != "," || j + 1 >= s.size() || s[j + 1].text != "(")
        unsupported(s, "indirect calls and prototypes are not interpreted");
      ++j;
      list(in.callArgs);
    }
    if (j != s.size())
      unsupported(s, "malformed call");
    ks.program.code.push_back(std::move(in));
  }

  void instruction(KernelState &ks, const std::vector<Token> &s) {
    Inst in;
    in.line = s[0].line;
    size_t j = 0;
    if (s[0].text == "@") {
      bool neg = s.size() > 1 && s[1].text == "!";
      j = neg ? 2 : 1;
      if (j >= s.size())
        unsupported(s, "malformed guard");
      in.guard = reg(ks, s, s[j].text);
      in.guardNeg = neg;
      ++j;
    }
    if (j >= s.size())
      unsupported(s, "no instruction after the guard");
    decode(s, s[j].text, in);
    ++j;
    // Operands: split at top-level commas.
    size_t start = j;
    int depth = 0;
    for (size_t k = j; k <= s.size(); ++k) {
      if (k == s.size() || (depth == 0 && s[k].text == ",")) {
        if (k > start)
          in.o.push_back(operand(ks, s, start, k));
        start = k + 1;
        continue;
      }
      depth += (s[k].text == "[" || s[k].text == "{") ? 1 : 0;
      depth -= (s[k].text == "]" || s[k].text == "}") ? 1 : 0;
    }
    in.text = sourceLine(in.line);
    check(s, in);
    lowerParam(ks, s, in);
    ks.program.code.push_back(std::move(in));
  }

  /// Splits the opcode at its dots into the base and its modifiers.
  void decode(const std::vector<Token> &s, const std::string &opcode,
              Inst &in) const {
    std::vector<std::string> parts;
    std::stringstream ss(opcode);
    for (std::string p; std::getline(ss, p, '.');)
      parts.push_back(p);
    const std::string &base = parts[0];
    static const std::unordered_map<std::string, Op> ops = {
        {"mov", Op::Mov},    {"add", Op::Add},
        {"sub", Op::Sub},    {"mul", Op::Mul},
        {"mad", Op::Mad},    {"fma", Op::Fma},
        {"madc", Op::Mad},   {"addc", Op::Add},
        {"div", Op::Div},    {"rem", Op::Rem},
        {"min", Op::Min},    {"max", Op::Max},
        {"abs", Op::Abs},    {"neg", Op::Neg},
        {"and", Op::And},    {"or", Op::Or},
        {"xor", Op::Xor},    {"not", Op::Not},
        {"cnot", Op::CNot},  {"shl", Op::Shl},
        {"shr", Op::Shr},    {"setp", Op::Setp},
        {"shf", Op::Shf},
        {"selp", Op::Selp},  {"cvt", Op::Cvt},
        {"cvta", Op::Cvta},  {"ld", Op::Ld},
        {"st", Op::St},      {"bra", Op::Bra},
        {"ret", Op::Ret},    {"exit", Op::Ret},
        {"bar", Op::Bar},    {"barrier", Op::Bar},
        {"shfl", Op::Shfl},  {"rcp", Op::Rcp},
        {"sqrt", Op::Sqrt},  {"rsqrt", Op::Rsqrt},
        {"ex2", Op::Ex2},    {"lg2", Op::Lg2},
        {"sin", Op::Sin},    {"cos", Op::Cos},
        {"tanh", Op::Tanh},  {"copysign", Op::Copysign},
        {"bfe", Op::Bfe},    {"bfi", Op::Bfi},
        {"popc", Op::Popc},  {"clz", Op::Clz},
        {"brev", Op::Brev},  {"prmt", Op::Prmt},
        {"atom", Op::Atom},  {"red", Op::Atom},
        {"membar", Op::Nop}, {"fence", Op::Nop}};
    auto it = ops.find(base);
    if (it == ops.end())
      unsupported(s, "the stand-in does not interpret '" + base + "'");
    in.op = it->second;
    in.carryIn = base == "madc" || base == "addc";
    in.atomReturns = base != "red";
    static const std::unordered_map<std::string, Cmp> cmps = {
        {"eq", Cmp::Eq},   {"ne", Cmp::Ne},   {"lt", Cmp::Lt},
        {"le", Cmp::Le},   {"gt", Cmp::Gt},   {"ge", Cmp::Ge},
        {"lo", Cmp::Lt},   {"ls", Cmp::Le},   {"hi", Cmp::Gt},
        {"hs", Cmp::Ge},   {"equ", Cmp::Equ}, {"neu", Cmp::Neu},
        {"ltu", Cmp::Ltu}, {"leu", Cmp::Leu}, {"gtu", Cmp::Gtu},
        {"geu", Cmp::Geu}, {"num", Cmp::Num}, {"nan", Cmp::Nan}};
    static const std::unordered_map<std::string, Rnd> rnds = {
        {"rn", Rnd::Rn},   {"rz", Rnd::Rz},   {"rm", Rnd::Rm},
        {"rp", Rnd::Rp},   {"rni", Rnd::Rni}, {"rzi", Rnd::Rzi},
        {"rmi", Rnd::Rmi}, {"rpi", Rnd::Rpi}};
    static const std::unordered_map<std::string, AtomOp> atoms = {
        {"add", AtomOp::Add},   {"min", AtomOp::Min}, {"max", AtomOp::Max},
        {"and", AtomOp::And},   {"or", AtomOp::Or},   {"xor", AtomOp::Xor},
        {"exch", AtomOp::Exch}, {"cas", AtomOp::Cas}, {"inc", AtomOp::Inc},
        {"dec", AtomOp::Dec}};
    bool sawType = false;
    for (size_t k = 1; k < parts.size(); ++k) {
      const std::string &p = parts[k];
      T ty = typeNamed(p);
      bool memory = in.op == Op::Ld || in.op == Op::St || in.op == Op::Atom;
      if (ty != T::None) {
        if (!sawType) {
          in.type = ty;
          sawType = true;
        } else if (in.op == Op::Cvt) {
          in.from = ty;
        } else if (in.op == Op::Setp && in.type == T::None) {
          in.type = ty;
        } else {
          unsupported(s, "too many types in '" + opcode + "'");
        }
      } else if (in.op == Op::Setp && cmps.count(p) && in.bop == BoolOp::None &&
                 !sawType) {
        in.cmp = cmps.at(p);
      } else if (in.op == Op::Setp && (p == "and" || p == "or" || p == "xor")) {
        in.bop = p == "and"  ? BoolOp::And
                 : p == "or" ? BoolOp::Or
                             : BoolOp::Xor;
      } else if (in.op == Op::Shf && (p == "l" || p == "r")) {
        in.shiftLeft = p == "l";
      } else if (in.op == Op::Shf && (p == "wrap" || p == "clamp")) {
        in.shiftWrap = p == "wrap";
      } else if (p == "cc" && (in.op == Op::Mad || in.op == Op::Add)) {
        in.carryOut = true;
      } else if ((in.op == Op::Mul || in.op == Op::Mad) &&
                 (p == "lo" || p == "hi" || p == "wide")) {
        in.part = p == "lo" ? Part::Lo : p == "hi" ? Part::Hi : Part::Wide;
      } else if (rnds.count(p) && !memory) {
        in.rnd = rnds.at(p);
      } else if (p == "ftz") {
        in.ftz = true;
      } else if (p == "sat" && in.op != Op::Mad) {
        in.sat = true;
      } else if (p == "NaN" && (in.op == Op::Min || in.op == Op::Max)) {
        in.nan = true;
      } else if (p == "approx" || p == "full" || p == "uni" || p == "nc" ||
                 p == "sync" || p == "aligned" || p == "relaxed" ||
                 p == "gpu" || p == "cta" || p == "sys" || p == "acq_rel" ||
                 p == "sc" || p == "ptr" ||
                 (memory && (p == "ca" || p == "cg" || p == "cs" || p == "lu" ||
                             p == "cv" || p == "wb" || p == "wt" ||
                             p.find("::") != std::string::npos))) {
      } else if (p == "global" || p == "shared" || p == "param" || p == "local") {
        in.space = p == "global"   ? Space::Global
                   : p == "shared" ? Space::Shared
                   : p == "local"  ? Space::Local
                                   : Space::Param;
      } else if (in.op == Op::Cvta && p == "to") {
        in.toGeneric = false;
      } else if (memory && (p == "v2" || p == "v4")) {
        in.vec = uint8_t(p[1] - '0');
      } else if (in.op == Op::Shfl &&
                 (p == "up" || p == "down" || p == "bfly" || p == "idx")) {
        in.shuffle = p == "up"     ? Shuffle::Up
                     : p == "down" ? Shuffle::Down
                     : p == "bfly" ? Shuffle::Bfly
                                   : Shuffle::Idx;
      } else if (in.op == Op::Atom && atoms.count(p)) {
        in.atom = atoms.at(p);
      } else {
        unsupported(s, "the stand-in does not interpret the modifier '." + p +
                           "' of '" + opcode + "'");
      }
    }
    if (in.op == Op::Bar &&
        (base == "bar" ? parts.size() > 1 && parts[1] != "sync"
                       : parts.size() > 1 && parts[1] != "sync"))
      unsupported(s, "only bar.sync / barrier.sync are interpreted");
    if (in.op == Op::Bar && parts.size() > 2 && parts[2] != "aligned")
      unsupported(s, "only whole-block barriers are interpreted");
    if ((in.rnd == Rnd::Rz || in.rnd == Rnd::Rm || in.rnd == Rnd::Rp) &&
        in.op != Op::Cvt && in.type != T::F32 && in.type != T::F64)
      unsupported(s, "directed rounding is interpreted for f32 and f64 only");
  }

  /// Operand counts and kinds the interpreter relies on.
  void check(const std::vector<Token> &s, const Inst &in) const {
    auto need = [&](size_t n) {
      if (in.o.size() != n)
        unsupported(s, "expected " + std::to_string(n) + " operands");
    };
    auto isValue = [](const Operand &o) {
      return o.kind == Operand::Reg || o.kind == Operand::Imm ||
             o.kind == Operand::Special || o.kind == Operand::Symbol;
    };
    auto dest = [&](const Operand &o) {
      if (o.kind != Operand::Reg && o.kind != Operand::Sink)
        unsupported(s, "the destination must be a register");
    };
    auto values = [&](size_t from) {
      for (size_t k = from; k < in.o.size(); ++k)
        if (!isValue(in.o[k]))
          unsupported(s,
                      "operand " + std::to_string(k + 1) + " must be a value");
    };
    auto plain = [&](size_t n) { // a register written from n - 1 values
      need(n);
      dest(in.o[0]);
      values(1);
    };
    bool floating =
        isFloat(in.type) || in.type == T::F16x2 || in.type == T::BF16x2;
    if (in.type == T::F16x2 || in.type == T::BF16x2) {
      if (in.op != Op::Mov && in.op != Op::Cvt && in.op != Op::Ld &&
          in.op != Op::St && !packedArithmetic(in.op))
        unsupported(s,
                    "this packed f16x2/bf16x2 instruction is not interpreted");
      if (packedArithmetic(in.op) && in.ftz)
        unsupported(s, "packed arithmetic with .ftz is not interpreted");
    }
    switch (in.op) {
    case Op::Mov:
      need(2);
      if (in.o[0].kind == Operand::Vec) {
        if (std::count(in.o[0].regs.begin(), in.o[0].regs.end(), kVecImm))
          unsupported(s, "mov unpacks into an immediate");
        if (!isValue(in.o[1]))
          unsupported(s, "mov unpacks a register");
      } else {
        dest(in.o[0]);
        if (in.o[1].kind != Operand::Vec)
          values(1);
      }
      break;
    case Op::Add:
    case Op::Sub:
    case Op::Div:
    case Op::Rem:
    case Op::Min:
    case Op::Max:
    case Op::And:
    case Op::Or:
    case Op::Xor:
    case Op::Shl:
    case Op::Shr:
    case Op::Copysign:
      plain(3);
      break;
    case Op::Mul:
      plain(3);
      if (!floating && in.part == Part::None)
        unsupported(s, "integer mul needs .lo, .hi or .wide");
      break;
    case Op::Shf:
      plain(4);
      if (in.type != T::B32)
        unsupported(s, "shf is .b32");
      break;
    case Op::Mad:
      plain(4);
      if (!floating && in.part == Part::None)
        unsupported(s, "integer mad needs .lo, .hi or .wide");
      break;
    case Op::Fma:
      plain(4);
      break;
    case Op::Abs:
    case Op::Neg:
    case Op::Not:
    case Op::CNot:
    case Op::Rcp:
    case Op::Sqrt:
    case Op::Rsqrt:
    case Op::Ex2:
    case Op::Lg2:
    case Op::Sin:
    case Op::Cos:
    case Op::Tanh:
    case Op::Popc:
    case Op::Clz:
    case Op::Brev:
    case Op::Cvt:
      if (in.op == Op::Cvt && (in.type == T::F16x2 || in.type == T::BF16x2)) {
        plain(3);
        break;
      }
      plain(2);
      if (in.op == Op::Cvt && in.from == T::None)
        unsupported(s, "cvt needs two types");
      break;
    case Op::Cvta:
      plain(2);
      if (in.space != Space::Global && in.space != Space::Shared &&
          in.space != Space::Local)
        unsupported(s, "cvta is interpreted for .global, .shared and .local");
      break;
    case Op::Setp:
      if (in.o.size() != 3 && in.o.size() != 4)
        unsupported(s, "setp takes 3 or 4 operands");
      if (in.o[0].kind != Operand::Reg && in.o[0].kind != Operand::Pair)
        unsupported(s, "setp writes a predicate");
      values(1);
      if ((in.o.size() == 4) != (in.bop != BoolOp::None))
        unsupported(s, "setp's boolean operation and its operand go together");
      break;
    case Op::Selp:
    case Op::Bfe:
    case Op::Prmt:
      plain(4);
      break;
    case Op::Bfi:
      plain(5);
      break;
    case Op::Ld:
    case Op::St: {
      // ld d, [a] / st [a], d: d is a register or, for .v2/.v4, a vector.
      bool load = in.op == Op::Ld;
      need(2);
      const Operand &data = in.o[load ? 0 : 1];
      if (in.o[load ? 1 : 0].kind != Operand::Addr)
        unsupported(s, "the address operand is not an address");
      if ((in.vec > 1) != (data.kind == Operand::Vec) ||
          (in.vec > 1 && data.regs.size() != in.vec))
        unsupported(s, "the data operand does not match the vector width");
      if (load && std::count(data.regs.begin(), data.regs.end(), kVecImm))
        unsupported(s, "a load into an immediate");
      if (in.vec == 1 && load)
        dest(data);
      if (in.vec == 1 && !load)
        values(1);
      break;
    }
    case Op::Atom: {
      size_t extra = in.atom == AtomOp::Cas ? 1 : 0;
      size_t at = in.atomReturns ? 1 : 0;
      need(at + 2 + extra);
      if (in.o[at].kind != Operand::Addr)
        unsupported(s, "atom needs an address");
      if (in.space == Space::Param)
        unsupported(s, "atom on .param");
      for (size_t k = at + 1; k < in.o.size(); ++k)
        if (!isValue(in.o[k]))
          unsupported(s, "atom's operands must be values");
      if (in.vec != 1)
        unsupported(s, "vector atomics are not interpreted");
      break;
    }
    case Op::Bra:
      need(1);
      if (in.o[0].kind != Operand::Symbol)
        unsupported(s, "bra takes a label");
      break;
    case Op::Ret:
    case Op::Nop:
    case Op::Label:
    case Op::Call:
      break;
    case Op::Bar:
      if (in.o.empty() || in.o.size() > 2)
        unsupported(s,
                    "bar.sync takes a barrier and optionally a thread count");
      values(0);
      break;
    case Op::Shfl:
      need(5);
      if (in.o[0].kind != Operand::Reg && in.o[0].kind != Operand::Pair)
        unsupported(s, "shfl writes a register");
      values(1);
      if (in.type != T::B32)
        unsupported(s, "shfl.sync is .b32");
      break;
    }
    if (in.type == T::None && in.op != Op::Bra && in.op != Op::Ret &&
        in.op != Op::Nop && in.op != Op::Bar)
      unsupported(s, "the instruction has no type");
    bool intOnly = in.op == Op::Rem || in.op == Op::Not || in.op == Op::CNot ||
                   in.op == Op::Shl || in.op == Op::Shr || in.op == Op::Shf ||
                   in.op == Op::Bfe ||
                   in.op == Op::Bfi || in.op == Op::Popc || in.op == Op::Clz ||
                   in.op == Op::Brev || in.op == Op::Prmt || in.op == Op::And ||
                   in.op == Op::Or || in.op == Op::Xor;
    bool floatOnly = in.op == Op::Fma || in.op == Op::Rcp ||
                     in.op == Op::Sqrt || in.op == Op::Rsqrt ||
                     in.op == Op::Ex2 || in.op == Op::Lg2 || in.op == Op::Sin ||
                     in.op == Op::Cos || in.op == Op::Tanh ||
                     in.op == Op::Copysign;
    if ((intOnly && floating) || (floatOnly && !floating))
      unsupported(s, "the instruction's type does not fit it");
  }

  void resolve(KernelState &ks) {
    std::map<std::string, size_t> params;
    for (const Parameter &p : ks.k.parameters)
      params[p.name] = p.offset;
    auto sharedVar = [&](const std::string &name) -> const SharedVar * {
      auto it = ks.localShared.find(name);
      if (it != ks.localShared.end())
        return &it->second;
      auto jt = moduleShared.find(name);
      return jt == moduleShared.end() ? nullptr : &jt->second;
    };
    // Static shared variables in order of first use, then the dynamic one.
    std::map<std::string, size_t> sharedOffset;
    std::vector<std::string> dynamicNames;
    size_t size = 0, dynamicAlign = 16;
    for (Inst &in : ks.program.code)
      for (Operand &o : in.o) {
        if (o.symbol.empty() || sharedOffset.count(o.symbol))
          continue;
        if (const SharedVar *v = sharedVar(o.symbol)) {
          if (v->dynamic) {
            dynamicAlign = std::max(dynamicAlign, v->align);
            dynamicNames.push_back(o.symbol);
            sharedOffset[o.symbol] = SIZE_MAX;
            continue;
          }
          size = (size + v->align - 1) / v->align * v->align;
          sharedOffset[o.symbol] = size;
          size += v->bytes;
        }
      }
    if (!dynamicNames.empty())
      size = (size + dynamicAlign - 1) / dynamicAlign * dynamicAlign;
    for (const std::string &name : dynamicNames)
      sharedOffset[name] = size;
    ks.k.staticShared = size;
    // Local variables: one area per thread, in declaration order.
    std::map<std::string, size_t> localOffset;
    size_t local = 0;
    for (const auto &[name, v] : ks.localVars) {
      local = (local + v.align - 1) / v.align * v.align;
      localOffset[name] = local;
      local += v.bytes;
    }
    ks.k.localBytes = local;
    // Labels become instruction indices.
    std::map<std::string, int> labels;
    std::vector<Inst> code;
    for (Inst &in : ks.program.code) {
      if (in.op == Op::Label)
        labels[in.text] = int(code.size());
      else
        code.push_back(std::move(in));
    }
    ks.program.code = std::move(code);
    for (Inst &in : ks.program.code) {
      auto fail = [&](const std::string &why) {
        ks.k.problem =
            "line " + std::to_string(in.line) + " (" + in.text + "): " + why;
      };
      for (Operand &o : in.o) {
        if (o.symbol.empty())
          continue;
        if (in.op == Op::Bra) {
          auto it = labels.find(o.symbol);
          if (it == labels.end())
            return fail("no label " + o.symbol);
          in.target = it->second;
          continue;
        }
        auto it = sharedOffset.find(o.symbol);
        auto pt = params.find(o.symbol);
        auto lt = localOffset.find(o.symbol);
        if (lt != localOffset.end()) {
          bool generic = o.kind == Operand::Addr && in.space == Space::Generic;
          if (o.kind == Operand::Addr && in.space != Space::Local && !generic)
            return fail("local variable " + o.symbol + " in a non-local access");
          o.imm += int64_t(lt->second) + (generic ? int64_t(kLocalWindow) : 0);
          if (o.kind == Operand::Symbol)
            o.kind = Operand::Imm; // its address in the local space
        } else if (o.kind == Operand::Addr && pt != params.end()) {
          if (in.space != Space::Param)
            return fail("a parameter is read with ld.param");
          o.imm += int64_t(pt->second);
        } else if (it != sharedOffset.end()) {
          bool generic = o.kind == Operand::Addr && in.space == Space::Generic;
          if (o.kind == Operand::Addr && in.space != Space::Shared && !generic)
            return fail("shared variable " + o.symbol +
                        " in a non-shared access");
          o.imm += int64_t(it->second) + (generic ? int64_t(kSharedWindow) : 0);
          if (o.kind == Operand::Symbol)
            o.kind = Operand::Imm; // its address in the shared window
        } else if (auto gt = moduleGlobals.find(o.symbol); gt != moduleGlobals.end()) {
          if (o.kind == Operand::Addr && in.space != Space::Global &&
              in.space != Space::Generic)
            return fail("global variable " + o.symbol + " in a non-global access");
          o.imm += int64_t(reinterpret_cast<uintptr_t>(gt->second->data()));
          if (o.kind == Operand::Symbol)
            o.kind = Operand::Imm; // its (host) address
          if (std::find(ks.k.globals.begin(), ks.k.globals.end(), gt->second) ==
              ks.k.globals.end())
            ks.k.globals.push_back(gt->second);
        } else {
          return fail("unknown symbol " + o.symbol +
                      " (the stand-in models parameters, shared, local and initialized "
                      "global variables)");
        }
        o.symbol.clear();
      }
    }
  }
};

//===----------------------------------------------------------------------===//
// Arithmetic
//===----------------------------------------------------------------------===//

inline uint64_t maskTo(uint64_t v, int bits) {
  return bits >= 64 ? v : v & ((uint64_t(1) << bits) - 1);
}
inline int64_t signExtend(uint64_t v, int bits) {
  if (bits >= 64)
    return int64_t(v);
  uint64_t m = uint64_t(1) << (bits - 1);
  return int64_t((maskTo(v, bits) ^ m) - m);
}
inline float asF32(uint64_t v) { return bitsToFloat(uint32_t(v)); }
inline uint64_t bitsF32(float f) { return floatToBits(f); }
inline double asF64(uint64_t v) {
  double d;
  std::memcpy(&d, &v, 8);
  return d;
}
inline uint64_t bitsF64(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

double toDouble(T t, uint64_t v) {
  switch (t) {
  case T::F32:
    return asF32(v);
  case T::F64:
    return asF64(v);
  case T::F16:
    return halfBitsToFloat(uint16_t(v));
  case T::BF16:
    return bf16BitsToFloat(uint16_t(v));
  default:
    return 0;
  }
}

float flush(float f) {
  return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f;
}

/// Rounds an exact-in-double (or already nearest) value to `t`.
uint64_t fromDouble(T t, double x) {
  switch (t) {
  case T::F32:
    return bitsF32(float(x));
  case T::F64:
    return bitsF64(x);
  case T::F16:
    return floatToHalfBits(float(x));
  case T::BF16:
    return floatToBf16Bits(float(x));
  default:
    return 0;
  }
}

struct RoundingMode {
  int saved;
  explicit RoundingMode(Rnd r) : saved(std::fegetround()) {
    int mode = r == Rnd::Rz   ? FE_TOWARDZERO
               : r == Rnd::Rm ? FE_DOWNWARD
               : r == Rnd::Rp ? FE_UPWARD
                              : FE_TONEAREST;
    std::fesetround(mode);
  }
  ~RoundingMode() { std::fesetround(saved); }
};

/// A floating binary/ternary operation in `t`: f32 and f64 natively under
/// the instruction's rounding, f16/bf16 through double (exact for + - *
/// of such narrow values; fma rounds once more).
template <class F32Op, class F64Op>
uint64_t floatOp(const Inst &in, uint64_t a, uint64_t b, uint64_t c, F32Op f32,
                 F64Op f64) {
  switch (in.type) {
  case T::F32: {
    float x = asF32(a), y = asF32(b), z = asF32(c);
    if (in.ftz) {
      x = flush(x);
      y = flush(y);
      z = flush(z);
    }
    float r;
    if (in.rnd == Rnd::Rz || in.rnd == Rnd::Rm || in.rnd == Rnd::Rp) {
      RoundingMode mode(in.rnd);
      volatile float vx = x, vy = y, vz = z; // computed under the mode
      r = f32(vx, vy, vz);
    } else {
      r = f32(x, y, z);
    }
    if (in.ftz)
      r = flush(r);
    if (in.sat)
      r = std::isnan(r) ? 0.0f : std::fmin(std::fmax(r, 0.0f), 1.0f);
    return bitsF32(r);
  }
  case T::F64: {
    double x = asF64(a), y = asF64(b), z = asF64(c), r;
    if (in.rnd == Rnd::Rz || in.rnd == Rnd::Rm || in.rnd == Rnd::Rp) {
      RoundingMode mode(in.rnd);
      volatile double vx = x, vy = y, vz = z;
      r = f64(vx, vy, vz);
    } else {
      r = f64(x, y, z);
    }
    return bitsF64(r);
  }
  default: {
    double r =
        f64(toDouble(in.type, a), toDouble(in.type, b), toDouble(in.type, c));
    if (in.sat)
      r = std::isnan(r) ? 0.0 : std::fmin(std::fmax(r, 0.0), 1.0);
    return fromDouble(in.type, r);
  }
  }
}

/// PTX min/max: a NaN operand is ignored unless .NaN; -0 < +0.
double minMax(double x, double y, bool isMax, bool nanPropagates) {
  if (std::isnan(x) || std::isnan(y)) {
    if (nanPropagates || (std::isnan(x) && std::isnan(y)))
      return std::numeric_limits<double>::quiet_NaN();
    return std::isnan(x) ? y : x;
  }
  if (x == y && x == 0)
    return (std::signbit(x) != isMax) ? x : y;
  return isMax ? std::max(x, y) : std::min(x, y);
}

uint64_t canonicalNan(T t) {
  switch (t) {
  case T::F32:
    return 0x7fffffffu;
  case T::F16:
    return 0x7fffu;
  case T::BF16:
    return 0x7fffu;
  default:
    return 0x7fffffffffffffffull;
  }
}

bool compare(Cmp c, double x, double y) {
  bool unordered = std::isnan(x) || std::isnan(y);
  switch (c) {
  case Cmp::Eq:
    return !unordered && x == y;
  case Cmp::Ne:
    return !unordered && x != y;
  case Cmp::Lt:
    return !unordered && x < y;
  case Cmp::Le:
    return !unordered && x <= y;
  case Cmp::Gt:
    return !unordered && x > y;
  case Cmp::Ge:
    return !unordered && x >= y;
  case Cmp::Equ:
    return unordered || x == y;
  case Cmp::Neu:
    return unordered || x != y;
  case Cmp::Ltu:
    return unordered || x < y;
  case Cmp::Leu:
    return unordered || x <= y;
  case Cmp::Gtu:
    return unordered || x > y;
  case Cmp::Geu:
    return unordered || x >= y;
  case Cmp::Num:
    return !unordered;
  case Cmp::Nan:
    return unordered;
  }
  return false;
}

template <class V> bool compareInt(Cmp c, V x, V y) {
  switch (c) {
  case Cmp::Eq:
    return x == y;
  case Cmp::Ne:
    return x != y;
  case Cmp::Lt:
    return x < y;
  case Cmp::Le:
    return x <= y;
  case Cmp::Gt:
    return x > y;
  case Cmp::Ge:
    return x >= y;
  default:
    return false;
  }
}

/// Float to float or integer conversion with cvt's rounding modifiers.
uint64_t convert(const Inst &in, uint64_t v) {
  T to = in.type, from = in.from;
  int toBits = bitsOf(to), fromBits = bitsOf(from);
  if (!isFloat(from)) {
    if (!isFloat(to)) { // integer to integer: extend by the source's sign
      if (in.sat && (isSigned(from) != isSigned(to) || toBits < fromBits)) {
        // Clamp to the destination's range.
        if (isSigned(from)) {
          int64_t x = signExtend(v, fromBits);
          int64_t lo =
              isSigned(to)
                  ? (toBits >= 64 ? INT64_MIN : -(int64_t(1) << (toBits - 1)))
                  : 0;
          int64_t hi =
              isSigned(to)
                  ? (toBits >= 64 ? INT64_MAX
                                  : (int64_t(1) << (toBits - 1)) - 1)
                  : (toBits >= 64 ? INT64_MAX : int64_t(maskTo(~0ull, toBits)));
          x = std::min(std::max(x, lo), hi);
          return maskTo(uint64_t(x), toBits);
        }
        uint64_t x = maskTo(v, fromBits);
        uint64_t hi = isSigned(to) ? (uint64_t(1) << (toBits - 1)) - 1
                                   : maskTo(~0ull, toBits);
        return std::min(x, hi);
      }
      uint64_t x = isSigned(from) ? uint64_t(signExtend(v, fromBits))
                                  : maskTo(v, fromBits);
      return maskTo(x, toBits);
    }
    // Integer to float, rounded (.rn by default) in the destination type.
    RoundingMode mode(in.rnd);
    if (to == T::F64) {
      volatile double d = isSigned(from) ? double(signExtend(v, fromBits))
                                         : double(maskTo(v, fromBits));
      return bitsF64(d);
    }
    volatile float f = isSigned(from) ? float(signExtend(v, fromBits))
                                      : float(maskTo(v, fromBits));
    if (to == T::F32)
      return bitsF32(f);
    return fromDouble(to, f);
  }
  double x = toDouble(from, v);
  if (in.ftz && from == T::F32)
    x = flush(float(x));
  if (isFloat(to)) {
    switch (in.rnd) { // rounding to an integral value in the same type
    case Rnd::Rni:
      x = std::nearbyint(x);
      break;
    case Rnd::Rzi:
      x = std::trunc(x);
      break;
    case Rnd::Rmi:
      x = std::floor(x);
      break;
    case Rnd::Rpi:
      x = std::ceil(x);
      break;
    default:
      break;
    }
    if (in.sat)
      x = std::isnan(x) ? 0.0 : std::fmin(std::fmax(x, 0.0), 1.0);
    if (to == T::F32 && from == T::F64 && in.rnd != Rnd::Rn &&
        in.rnd != Rnd::None && in.rnd != Rnd::Rni && in.rnd != Rnd::Rzi &&
        in.rnd != Rnd::Rmi && in.rnd != Rnd::Rpi) {
      RoundingMode mode(in.rnd);
      volatile double vx = x;
      volatile float f = float(vx);
      return bitsF32(f);
    }
    uint64_t r = fromDouble(to, x);
    if (in.ftz && to == T::F32)
      r = bitsF32(flush(asF32(r)));
    return r;
  }
  // Float to integer: round as asked, saturate, NaN gives 0.
  if (std::isnan(x))
    return 0;
  switch (in.rnd) {
  case Rnd::Rni:
  case Rnd::Rn:
    x = std::nearbyint(x);
    break;
  case Rnd::Rmi:
  case Rnd::Rm:
    x = std::floor(x);
    break;
  case Rnd::Rpi:
  case Rnd::Rp:
    x = std::ceil(x);
    break;
  default:
    x = std::trunc(x);
    break;
  }
  if (isSigned(to)) {
    double lo = -std::ldexp(1.0, toBits - 1), hi = std::ldexp(1.0, toBits - 1);
    int64_t r =
        x <= lo ? (toBits >= 64 ? INT64_MIN : -(int64_t(1) << (toBits - 1)))
        : x >= hi
            ? (toBits >= 64 ? INT64_MAX : (int64_t(1) << (toBits - 1)) - 1)
            : int64_t(x);
    return maskTo(uint64_t(r), toBits);
  }
  double hi = std::ldexp(1.0, toBits);
  uint64_t r = x <= 0 ? 0 : x >= hi ? maskTo(~0ull, toBits) : uint64_t(x);
  return r;
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

struct Thread {
  unsigned tid[3];
  unsigned linear, lane, warp;
  size_t pc = 0;
  enum State : uint8_t { Run, AtBarrier, AtShuffle, Done } state = Run;
  uint64_t *r;
  uint8_t carry = 0; // the condition code's carry flag (.cc, madc)
};

class BlockRunner {
public:
  BlockRunner(const Kernel &k, const Launch &l, const RangeCheck &g)
      : kernel(k), code(k.program->code), launch(l), global(g) {
    nthreads = l.block[0] * l.block[1] * l.block[2];
    if (const char *trace = std::getenv("SHARDFLOW_STANDIN_PTX_TRACE")) {
      std::string spec = trace;
      size_t colon = spec.find(':');
      if (spec.substr(0, colon) == k.name) {
        traceBlock = traceThread = 0;
        if (colon != std::string::npos)
          std::sscanf(spec.c_str() + colon + 1, "%ld:%ld", &traceBlock,
                      &traceThread);
      }
    }
    registers.resize(size_t(nthreads) * std::max(k.program->registers, 1));
    shared.resize(k.staticShared + l.dynamicShared);
    sharedAccess.assign(shared.size(), SharedAccess{});
    local.assign(size_t(nthreads) * k.localBytes, 0);
    threads.resize(nthreads);
    syncGen.assign(nthreads, 0);
  }

  void run(unsigned bx, unsigned by, unsigned bz) {
    cta[0] = bx;
    cta[1] = by;
    cta[2] = bz;
    traced =
        traceBlock == long(bx + launch.grid[0] * (by + launch.grid[1] * bz));
    std::fill(registers.begin(), registers.end(), 0);
    std::fill(shared.begin(), shared.end(), 0xff);
    std::fill(local.begin(), local.end(), 0xff);
    ++epoch; // a new block: nothing it does races with the last one's
    int regs = std::max(kernel.program->registers, 1);
    for (unsigned i = 0; i < nthreads; ++i) {
      Thread &t = threads[i];
      t.tid[0] = i % launch.block[0];
      t.tid[1] = (i / launch.block[0]) % launch.block[1];
      t.tid[2] = i / (launch.block[0] * launch.block[1]);
      t.linear = i;
      t.lane = i % 32;
      t.warp = i / 32;
      t.pc = 0;
      t.state = Thread::Run;
      t.r = &registers[size_t(i) * regs];
    }
    for (;;) {
      for (Thread &t : threads)
        if (t.state == Thread::Run)
          step(t);
      bool moved = false;
      unsigned warps = (nthreads + 31) / 32;
      for (unsigned w = 0; w < warps; ++w)
        moved |= shuffle(w);
      if (moved)
        continue;
      size_t live = 0, waiting = 0;
      for (const Thread &t : threads) {
        live += t.state != Thread::Done;
        waiting += t.state == Thread::AtBarrier;
      }
      if (!live)
        return;
      if (waiting == live) {
        for (Thread &t : threads)
          if (t.state == Thread::AtBarrier) {
            const Inst &in = code[t.pc];
            if (in.o.size() == 2 && value(in.o[1], t) != live &&
                value(in.o[1], t) != nthreads)
              fault(
                  t,
                  "bar.sync with a thread count other than the block's is not "
                  "interpreted");
            t.state = Thread::Run;
            ++t.pc;
          }
        ++epoch; // the barrier orders the accesses before it and after it
        continue;
      }
      // Some threads wait at a barrier, others at a shuffle whose warp
      // never completes: on a GPU this hangs or is undefined.
      for (Thread &t : threads)
        if (t.state == Thread::AtShuffle)
          fault(t, "the lanes named in shfl.sync's mask never all reach it "
                   "(others wait at "
                   "a barrier or have exited)");
      fault(threads[0], "threads never meet");
    }
  }

private:
  const Kernel &kernel;
  const std::vector<Inst> &code;
  const Launch &launch;
  const RangeCheck &global;
  unsigned nthreads;
  unsigned cta[3];
  std::vector<uint64_t> registers;
  std::vector<uint8_t> shared;
  /// Whether [address, address + bytes) lies in one of the module's
  /// initialized arrays the kernel reads.
  bool moduleGlobal(uint64_t address, size_t bytes) const {
    for (const auto &g : kernel.globals) {
      auto begin = reinterpret_cast<uintptr_t>(g->data());
      if (address >= begin && address - begin <= g->size() &&
          bytes <= g->size() - (address - begin))
        return true;
    }
    return false;
  }
  // Every thread's .local variables, kernel.localBytes each.
  std::vector<uint8_t> local;
  std::vector<Thread> threads;

  // The race check: per byte of shared memory, who last wrote it and who
  // read it since, with the barrier interval ("epoch", unique across the
  // launch's blocks) each happened in. Two threads touching one byte in one
  // interval, one of them writing, race unless a shfl.sync both took part
  // in came between (they are lanes of one warp that met there), or both
  // write the same bytes (the all-reduce's broadcast of its result).
  // Atomics are not tracked. syncGen[thread]: the latest shfl.sync it
  // completed, numbered in completion order.
  struct SharedAccess {
    uint32_t writeEpoch = 0, readEpoch = 0;
    uint32_t writeGen = 0, readGen = 0; // the accessor's syncGen then
    int32_t writer = -1, reader = -1;   // reader -2: several threads read it
    int32_t readWarp = -1;              // the readers' warp (-1: several)
  };
  std::vector<SharedAccess> sharedAccess;
  std::vector<uint32_t> syncGen;
  uint32_t epoch = 0, syncCounter = 0;

  enum class Access { Read, Write, Atomic };

  /// Whether thread `b`'s access when its syncGen was `gen` is ordered
  /// before thread `a`'s now: both passed a later shuffle of their warp.
  bool synced(int32_t b, uint32_t gen, const Thread &a) const {
    return threads[size_t(b)].warp == a.warp && syncGen[size_t(b)] > gen &&
           syncGen[a.linear] > gen;
  }

  void checkRace(const Thread &t, uint64_t address, size_t bytes, Access access,
                 const uint8_t *incoming) {
    int32_t me = int32_t(t.linear);
    for (size_t i = 0; i < bytes; ++i) {
      SharedAccess &a = sharedAccess[address + i];
      int32_t other = -1;
      const char *mine = nullptr, *theirs = nullptr;
      bool sameValue = incoming && incoming[i] == shared[address + i];
      if (a.writeEpoch == epoch && a.writer != me &&
          !synced(a.writer, a.writeGen, t) &&
          !(access == Access::Write && sameValue)) {
        other = a.writer;
        mine = access == Access::Read ? "reads" : "writes";
        theirs = "wrote";
      } else if (access == Access::Write && a.readEpoch == epoch &&
                 a.reader != me &&
                 !(a.reader >= 0 ? synced(a.reader, a.readGen, t)
                                 : a.readWarp == int32_t(t.warp) &&
                                       syncGen[t.linear] > a.readGen)) {
        other = a.reader;
        mine = "writes";
        theirs = "read";
      }
      if (mine) {
        std::ostringstream os;
        os << "shared memory race: this thread " << mine << " shared byte "
           << address + i << ", which ";
        if (other >= 0)
          os << "thread (" << threads[size_t(other)].tid[0] << ","
             << threads[size_t(other)].tid[1] << ","
             << threads[size_t(other)].tid[2] << ")";
        else
          os << "other threads";
        os << " " << theirs << " since the last bar.sync";
        fault(t, os.str());
      }
      uint32_t gen = syncGen[t.linear];
      if (access == Access::Write) {
        a.writeEpoch = epoch;
        a.writer = me;
        a.writeGen = gen;
      } else if (access == Access::Read) {
        if (a.readEpoch != epoch) {
          a.reader = me;
          a.readGen = gen;
          a.readWarp = int32_t(t.warp);
        } else if (a.reader != me) {
          a.reader = -2;
          a.readGen = std::max(a.readGen, gen);
          if (a.readWarp != int32_t(t.warp))
            a.readWarp = -1;
        }
        a.readEpoch = epoch;
      }
    }
  }

  [[noreturn]] void fault(const Thread &t, const std::string &why,
                          Fault::Kind kind = Fault::Kind::Other) const {
    std::ostringstream os;
    os << "kernel " << kernel.name << ", block (" << cta[0] << "," << cta[1]
       << "," << cta[2] << ") thread (" << t.tid[0] << "," << t.tid[1] << ","
       << t.tid[2] << ")";
    if (t.pc < code.size())
      os << ", PTX line " << code[t.pc].line << " '" << code[t.pc].text << "'";
    os << ": " << why;
    throw Fault(kind, os.str());
  }

  uint64_t special(int code, const Thread &t) const {
    switch (code) {
    case TidX:
      return t.tid[0];
    case TidY:
      return t.tid[1];
    case TidZ:
      return t.tid[2];
    case NtidX:
      return launch.block[0];
    case NtidY:
      return launch.block[1];
    case NtidZ:
      return launch.block[2];
    case CtaidX:
      return cta[0];
    case CtaidY:
      return cta[1];
    case CtaidZ:
      return cta[2];
    case NctaidX:
      return launch.grid[0];
    case NctaidY:
      return launch.grid[1];
    case NctaidZ:
      return launch.grid[2];
    case LaneId:
      return t.lane;
    case WarpId:
      return t.warp;
    case NWarpId:
      return (nthreads + 31) / 32;
    case DynamicSmem:
      return launch.dynamicShared;
    }
    return 0;
  }

  /// Element k of a vector operand: its register, its immediate, or 0
  /// for a sink.
  uint64_t element(const Operand &o, size_t k, const Thread &t) const {
    int r = o.regs[k];
    return r >= 0 ? t.r[size_t(r)] : r == kVecImm ? uint64_t(o.imms[k]) : 0;
  }

  uint64_t value(const Operand &o, const Thread &t) const {
    switch (o.kind) {
    case Operand::Reg:
      return o.neg ? !t.r[o.reg] : t.r[o.reg];
    case Operand::Imm:
      return uint64_t(o.imm);
    case Operand::Special:
      return special(int(o.imm), t);
    default:
      return 0;
    }
  }

  void write(const Operand &o, Thread &t, uint64_t v, int bits) {
    if (o.kind == Operand::Reg)
      t.r[o.reg] = maskTo(v, bits);
  }

  uint8_t *memory(const Inst &in, const Thread &t, uint64_t address,
                  size_t bytes, Access access,
                  const uint8_t *incoming = nullptr) {
    const char *what = access == Access::Read    ? "load"
                       : access == Access::Write ? "store"
                                                 : "atomic";
    Space space = in.space;
    if (space == Space::Generic) {
      if ((address & kWindowMask) == kSharedWindow) {
        space = Space::Shared;
        address -= kSharedWindow;
      } else if ((address & kWindowMask) == kLocalWindow) {
        space = Space::Local;
        address -= kLocalWindow;
      } else {
        space = Space::Global;
      }
    }
    auto describe = [&](const char *where) {
      std::ostringstream os;
      os << where << " " << what << " of " << bytes << " bytes at 0x"
         << std::hex << address;
      return os.str();
    };
    if (address % bytes)
      fault(t,
            describe(space == Space::Shared  ? "shared"
                     : space == Space::Param ? "parameter"
                     : space == Space::Local ? "local"
                                             : "global") +
                " is misaligned",
            Fault::Kind::Misaligned);
    switch (space) {
    case Space::Global:
      if (!global(address, bytes) && !moduleGlobal(address, bytes))
        fault(t, describe("global") + " is outside every device allocation",
              Fault::Kind::IllegalAddress);
      return reinterpret_cast<uint8_t *>(address);
    case Space::Shared:
      if (address > shared.size() || bytes > shared.size() - address)
        fault(t,
              describe("shared") + " is outside the block's " +
                  std::to_string(shared.size()) + " bytes of shared memory",
              Fault::Kind::IllegalAddress);
      checkRace(t, address, bytes, access, incoming);
      return shared.data() + address;
    case Space::Local: {
      size_t n = kernel.localBytes;
      if (address > n || bytes > n - address)
        fault(t,
              describe("local") + " is outside the thread's " + std::to_string(n) +
                  " bytes of local memory",
              Fault::Kind::IllegalAddress);
      return local.data() + size_t(t.linear) * n + address;
    }
    case Space::Param:
      if (address > launch.parameters.size() ||
          bytes > launch.parameters.size() - address)
        fault(t, describe("parameter") + " is outside the parameters",
              Fault::Kind::IllegalAddress);
      return const_cast<uint8_t *>(launch.parameters.data()) + address;
    default:
      fault(t, "unknown state space");
    }
  }

  static uint64_t loadBytes(const uint8_t *p, size_t bytes) {
    uint64_t v = 0;
    std::memcpy(&v, p, bytes); // little-endian host, as the GPU
    return v;
  }

  void step(Thread &t);
  uint64_t packed(const Inst &in, Thread &t);

  // SHARDFLOW_STANDIN_PTX_TRACE=KERNEL:BLOCK:THREAD (linear indices): every
  // instruction that thread runs, with the register it wrote, on stderr.
  long traceBlock = -1, traceThread = -1;
  bool traced = false; // this block is the traced one

  void traceLine(const Inst &in, const Thread &t) const {
    std::fprintf(stderr, "ptx %s line %d: %s", kernel.name.c_str(), in.line,
                 in.text.c_str());
    if (!in.o.empty() &&
        (in.o[0].kind == Operand::Reg || in.o[0].kind == Operand::Pair) &&
        in.op != Op::St && in.op != Op::Bra)
      std::fprintf(stderr, "  -> 0x%llx",
                   static_cast<unsigned long long>(t.r[in.o[0].reg]));
    std::fprintf(stderr, "\n");
  }
  bool shuffle(unsigned warp);
  uint64_t atomic(const Inst &in, Thread &t, uint8_t *p, uint64_t b,
                  uint64_t c);
};

uint64_t BlockRunner::atomic(const Inst &in, Thread &t, uint8_t *p, uint64_t b,
                             uint64_t c) {
  int bits = bitsOf(in.type);
  size_t bytes = size_t(bits / 8);
  uint64_t old = loadBytes(p, bytes), r = old;
  bool floating = isFloat(in.type);
  switch (in.atom) {
  case AtomOp::Add:
    r = floating
            ? fromDouble(in.type, toDouble(in.type, old) + toDouble(in.type, b))
            : old + b;
    break;
  case AtomOp::Min:
  case AtomOp::Max: {
    bool isMax = in.atom == AtomOp::Max;
    if (floating)
      r = fromDouble(in.type, minMax(toDouble(in.type, old),
                                     toDouble(in.type, b), isMax, false));
    else if (isSigned(in.type))
      r = uint64_t(isMax
                       ? std::max(signExtend(old, bits), signExtend(b, bits))
                       : std::min(signExtend(old, bits), signExtend(b, bits)));
    else
      r = isMax ? std::max(maskTo(old, bits), maskTo(b, bits))
                : std::min(maskTo(old, bits), maskTo(b, bits));
    break;
  }
  case AtomOp::And:
    r = old & b;
    break;
  case AtomOp::Or:
    r = old | b;
    break;
  case AtomOp::Xor:
    r = old ^ b;
    break;
  case AtomOp::Exch:
    r = b;
    break;
  case AtomOp::Cas:
    r = maskTo(old, bits) == maskTo(b, bits) ? c : old;
    break;
  case AtomOp::Inc:
    r = maskTo(old, bits) >= maskTo(b, bits) ? 0 : old + 1;
    break;
  case AtomOp::Dec:
    r = (maskTo(old, bits) == 0 || maskTo(old, bits) > maskTo(b, bits))
            ? b
            : old - 1;
    break;
  }
  (void)t;
  r = maskTo(r, bits);
  std::memcpy(p, &r, bytes);
  return old;
}

bool BlockRunner::shuffle(unsigned warp) {
  unsigned first = warp * 32, last = std::min(nthreads, first + 32);
  const Thread *lead = nullptr;
  for (unsigned i = first; i < last; ++i)
    if (threads[i].state == Thread::AtShuffle) {
      lead = &threads[i];
      break;
    }
  if (!lead)
    return false;
  uint32_t mask = uint32_t(value(code[lead->pc].o[4], *lead));
  // Every lane of the mask must be here, at a shuffle.
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1))
      continue;
    if (first + lane >= last)
      fault(*lead, "shfl.sync's mask names lane " + std::to_string(lane) +
                       ", which this block does not have");
    const Thread &other = threads[first + lane];
    if (other.state == Thread::Run)
      return false; // not there yet (cannot happen: all ran)
    if (other.state == Thread::AtBarrier)
      return false; // a deadlock unless the barrier opens: reported by run()
    if (other.state == Thread::Done)
      fault(*lead, "shfl.sync's mask names lane " + std::to_string(lane) +
                       ", which has exited");
    if (other.pc != lead->pc)
      fault(
          *lead,
          "lanes of one warp wait at different shfl.sync instructions (lines " +
              std::to_string(code[lead->pc].line) + " and " +
              std::to_string(code[other.pc].line) + ")");
  }
  const Inst &in = code[lead->pc];
  const size_t pc = lead->pc;
  // The lanes meet here: what each did before is ordered before what the
  // others do after (the race check).
  uint32_t gen = ++syncCounter;
  for (unsigned lane = 0; lane < 32; ++lane)
    if (mask >> lane & 1)
      syncGen[first + lane] = gen;
  uint64_t source[32];
  for (unsigned lane = 0; lane < 32; ++lane)
    if (mask >> lane & 1) {
      const Thread &other = threads[first + lane];
      if (uint32_t(value(in.o[4], other)) != mask)
        fault(other, "lanes of one warp run shfl.sync with different masks");
      source[lane] = value(in.o[1], other);
    }
  if (!(mask >> lead->lane & 1))
    fault(*lead, "a lane runs shfl.sync without being in its mask");
  for (unsigned i = first; i < last; ++i) {
    Thread &t = threads[i];
    if (!(mask >> t.lane & 1))
      continue; // at another shuffle, or not at one
    uint32_t lane = t.lane, b = uint32_t(value(in.o[2], t)) & 31,
             c = uint32_t(value(in.o[3], t));
    uint32_t clamp = c & 31, segmask = (c >> 8) & 31;
    uint32_t maxLane = (lane & segmask) | (clamp & ~segmask),
             minLane = lane & segmask;
    int64_t j = lane;
    bool inRange = true;
    switch (in.shuffle) {
    case Shuffle::Up:
      j = int64_t(lane) - b;
      inRange = j >= int64_t(maxLane);
      break;
    case Shuffle::Down:
      j = int64_t(lane) + b;
      inRange = j <= int64_t(maxLane);
      break;
    case Shuffle::Bfly:
      j = lane ^ b;
      inRange = j <= int64_t(maxLane);
      break;
    case Shuffle::Idx:
      j = minLane | (b & ~segmask);
      inRange = j <= int64_t(maxLane);
      break;
    }
    if (!inRange)
      j = lane;
    uint64_t v;
    if (j < 0 || j > 31 || !(mask >> j & 1))
      v = 0xffffffffu; // the source lane is inactive: undefined on a GPU
    else
      v = source[j];
    const Operand &d = in.o[0];
    if (d.kind == Operand::Pair) {
      t.r[d.reg] = uint32_t(v);
      t.r[d.reg2] = inRange;
    } else {
      t.r[d.reg] = uint32_t(v);
    }
    t.state = Thread::Run;
    t.pc = pc + 1;
  }
  return true;
}

/// add, sub, mul, fma, min, max, neg or abs on both halves of f16x2 or
/// bf16x2 operands (the first half in the low 16 bits), each rounded to
/// its half's type.
uint64_t BlockRunner::packed(const Inst &in, Thread &t) {
  Inst half = in;
  half.type = in.type == T::F16x2 ? T::F16 : T::BF16;
  uint64_t result = 0;
  for (int k = 0; k < 2; ++k) {
    auto h = [&](size_t i) { return (value(in.o[i], t) >> (16 * k)) & 0xffff; };
    uint64_t r = 0;
    switch (in.op) {
    case Op::Add:
    case Op::Sub: {
      bool add = in.op == Op::Add;
      r = floatOp(
          half, h(1), h(2), 0,
          [add](float x, float y, float) { return add ? x + y : x - y; },
          [add](double x, double y, double) { return add ? x + y : x - y; });
      break;
    }
    case Op::Mul:
      r = floatOp(
          half, h(1), h(2), 0, [](float x, float y, float) { return x * y; },
          [](double x, double y, double) { return x * y; });
      break;
    case Op::Fma:
      r = floatOp(
          half, h(1), h(2), h(3),
          [](float x, float y, float z) { return std::fma(x, y, z); },
          [](double x, double y, double z) { return std::fma(x, y, z); });
      break;
    case Op::Min:
    case Op::Max: {
      double m = minMax(toDouble(half.type, h(1)), toDouble(half.type, h(2)),
                        in.op == Op::Max, in.nan);
      r = std::isnan(m) ? canonicalNan(half.type) : fromDouble(half.type, m);
      break;
    }
    case Op::Neg:
      r = h(1) ^ 0x8000;
      break;
    case Op::Abs:
      r = h(1) & 0x7fff;
      break;
    default:
      fault(t, "packed operation not interpreted");
    }
    result |= (r & 0xffff) << (16 * k);
  }
  return result;
}

void BlockRunner::step(Thread &t) {
  const size_t n = code.size();
  while (t.pc < n) {
    const Inst &in = code[t.pc];
    if (in.guard >= 0 && (t.r[in.guard] != 0) == in.guardNeg) {
      ++t.pc;
      continue;
    }
    const std::vector<Operand> &o = in.o;
    int bits = bitsOf(in.type);
    bool floating = isFloat(in.type);
    auto v = [&](size_t k) { return value(o[k], t); };
    if ((in.type == T::F16x2 || in.type == T::BF16x2) &&
        packedArithmetic(in.op)) {
      write(o[0], t, packed(in, t), 32);
      if (t.linear == traceThread && traced)
        traceLine(in, t);
      ++t.pc;
      continue;
    }
    switch (in.op) {
    case Op::Nop:
    case Op::Label:
    case Op::Call: // no longer there after parsing
      break;
    case Op::Ret:
      t.state = Thread::Done;
      return;
    case Op::Bra:
      t.pc = size_t(in.target);
      continue;
    case Op::Bar:
      t.state = Thread::AtBarrier;
      return;
    case Op::Shfl:
      t.state = Thread::AtShuffle;
      return;
    case Op::Mov: {
      if (o[0].kind == Operand::Vec) { // unpack
        uint64_t x = v(1);
        int piece = bits / int(o[0].regs.size());
        for (size_t k = 0; k < o[0].regs.size(); ++k)
          if (o[0].regs[k] >= 0)
            t.r[o[0].regs[k]] = maskTo(x >> (piece * k), piece);
      } else if (o[1].kind == Operand::Vec) { // pack
        uint64_t x = 0;
        int piece = bits / int(o[1].regs.size());
        for (size_t k = 0; k < o[1].regs.size(); ++k)
          x |= maskTo(element(o[1], k, t), piece) << (piece * k);
        write(o[0], t, x, bits);
      } else {
        write(o[0], t, v(1), bits);
      }
      break;
    }
    case Op::Add:
    case Op::Sub: {
      bool add = in.op == Op::Add;
      if (floating) {
        write(
            o[0], t,
            floatOp(
                in, v(1), v(2), 0,
                [add](float x, float y, float) { return add ? x + y : x - y; },
                [add](double x, double y, double) {
                  return add ? x + y : x - y;
                }),
            bits);
      } else if (in.sat) { // .s32 only
        int64_t r = add ? signExtend(v(1), 32) + signExtend(v(2), 32)
                        : signExtend(v(1), 32) - signExtend(v(2), 32);
        r = std::min<int64_t>(std::max<int64_t>(r, INT32_MIN), INT32_MAX);
        write(o[0], t, uint64_t(r), bits);
      } else if (add && (in.carryIn || in.carryOut)) {
        unsigned __int128 sum = (unsigned __int128)maskTo(v(1), bits) + maskTo(v(2), bits) +
                                (in.carryIn ? t.carry : 0);
        if (in.carryOut)
          t.carry = uint8_t((sum >> bits) & 1);
        write(o[0], t, uint64_t(sum), bits);
      } else {
        write(o[0], t, add ? v(1) + v(2) : v(1) - v(2), bits);
      }
      break;
    }
    case Op::Mul:
    case Op::Mad: {
      bool mad = in.op == Op::Mad;
      if (floating) {
        uint64_t c = mad ? v(3) : 0;
        uint64_t r =
            mad ? floatOp(
                      in, v(1), v(2), c,
                      [](float x, float y, float z) {
                        return std::fma(x, y, z);
                      },
                      [](double x, double y, double z) {
                        return std::fma(x, y, z);
                      })
                : floatOp(
                      in, v(1), v(2), 0,
                      [](float x, float y, float) { return x * y; },
                      [](double x, double y, double) { return x * y; });
        write(o[0], t, r, bits);
        break;
      }
      uint64_t a = v(1), b = v(2), r;
      bool s = isSigned(in.type);
      if (in.part == Part::Wide) {
        int64_t x = s ? signExtend(a, bits) : int64_t(maskTo(a, bits));
        int64_t y = s ? signExtend(b, bits) : int64_t(maskTo(b, bits));
        r = s ? uint64_t(x * y) : maskTo(a, bits) * maskTo(b, bits);
        if (mad)
          r += v(3);
        write(o[0], t, r, bits * 2);
        break;
      }
      if (in.part == Part::Hi) {
        if (bits == 64) {
          r = s ? uint64_t((__int128(int64_t(a)) * __int128(int64_t(b))) >> 64)
                : uint64_t((unsigned __int128)(a)*b >> 64);
        } else {
          r = s ? uint64_t((signExtend(a, bits) * signExtend(b, bits)) >> bits)
                : (maskTo(a, bits) * maskTo(b, bits)) >> bits;
        }
      } else {
        r = a * b;
      }
      if (mad && (in.carryIn || in.carryOut)) {
        // Carry out of the addend's width (unsigned, as the .cc forms are).
        unsigned __int128 sum = (unsigned __int128)maskTo(r, bits) + maskTo(v(3), bits) +
                                (in.carryIn ? t.carry : 0);
        if (in.carryOut)
          t.carry = uint8_t((sum >> bits) & 1);
        r = uint64_t(sum);
      } else if (mad) {
        r += v(3);
      }
      write(o[0], t, r, bits);
      break;
    }
    case Op::Fma:
      write(o[0], t,
            floatOp(
                in, v(1), v(2), v(3),
                [](float x, float y, float z) { return std::fma(x, y, z); },
                [](double x, double y, double z) { return std::fma(x, y, z); }),
            bits);
      break;
    case Op::Div:
    case Op::Rem: {
      if (floating) {
        write(o[0], t,
              floatOp(
                  in, v(1), v(2), 0,
                  [](float x, float y, float) { return x / y; },
                  [](double x, double y, double) { return x / y; }),
              bits);
        break;
      }
      bool div = in.op == Op::Div;
      uint64_t r;
      if (isSigned(in.type)) {
        int64_t x = signExtend(v(1), bits), y = signExtend(v(2), bits);
        if (y == 0)
          r = div ? ~0ull : uint64_t(x); // unspecified on a GPU; no host trap
        else if (y == -1)
          r = div ? uint64_t(-(uint64_t)x) : 0;
        else
          r = uint64_t(div ? x / y : x % y);
      } else {
        uint64_t x = maskTo(v(1), bits), y = maskTo(v(2), bits);
        r = y == 0 ? (div ? ~0ull : x) : (div ? x / y : x % y);
      }
      write(o[0], t, r, bits);
      break;
    }
    case Op::Min:
    case Op::Max: {
      bool isMax = in.op == Op::Max;
      uint64_t r;
      if (floating) {
        double x = toDouble(in.type, v(1)), y = toDouble(in.type, v(2));
        if (in.ftz && in.type == T::F32) {
          x = flush(float(x));
          y = flush(float(y));
        }
        double m = minMax(x, y, isMax, in.nan);
        r = std::isnan(m) ? canonicalNan(in.type) : fromDouble(in.type, m);
      } else if (isSigned(in.type)) {
        int64_t x = signExtend(v(1), bits), y = signExtend(v(2), bits);
        r = uint64_t(isMax ? std::max(x, y) : std::min(x, y));
      } else {
        uint64_t x = maskTo(v(1), bits), y = maskTo(v(2), bits);
        r = isMax ? std::max(x, y) : std::min(x, y);
      }
      write(o[0], t, r, bits);
      break;
    }
    case Op::Abs:
    case Op::Neg: {
      bool neg = in.op == Op::Neg;
      uint64_t x = v(1), r;
      if (floating) {
        uint64_t sign = uint64_t(1) << (bits - 1);
        if (in.ftz && in.type == T::F32)
          x = bitsF32(flush(asF32(x)));
        r = neg ? x ^ sign : x & ~sign;
      } else {
        int64_t y = signExtend(x, bits);
        r = neg ? uint64_t(0) - uint64_t(y)
                : (y < 0 ? uint64_t(0) - uint64_t(y) : uint64_t(y));
      }
      write(o[0], t, r, bits);
      break;
    }
    case Op::And:
      write(o[0], t, v(1) & v(2), bits);
      break;
    case Op::Or:
      write(o[0], t, v(1) | v(2), bits);
      break;
    case Op::Xor:
      write(o[0], t, v(1) ^ v(2), bits);
      break;
    case Op::Not:
      write(o[0], t, in.type == T::Pred ? !v(1) : ~v(1), bits);
      break;
    case Op::CNot:
      write(o[0], t, maskTo(v(1), bits) == 0, bits);
      break;
    case Op::Shf: {
      // {b, a} as 64 bits (b high), shifted by n: .l keeps the high word,
      // .r the low one; n is taken mod 32 (.wrap) or capped at 32 (.clamp).
      uint64_t pair = (maskTo(v(2), 32) << 32) | maskTo(v(1), 32);
      uint32_t n = uint32_t(v(3));
      n = in.shiftWrap ? n & 31 : std::min<uint32_t>(n, 32);
      uint64_t r = in.shiftLeft ? (n == 0 ? pair : pair << n) >> 32 : pair >> n;
      write(o[0], t, maskTo(r, 32), 32);
      break;
    }
    case Op::Shl:
    case Op::Shr: {
      uint64_t amount = uint32_t(v(2)), x = v(1), r;
      if (in.op == Op::Shl)
        r = amount >= uint64_t(bits) ? 0 : x << amount;
      else if (isSigned(in.type))
        r = uint64_t(signExtend(x, bits) >>
                     std::min<uint64_t>(amount, uint64_t(bits - 1)));
      else
        r = amount >= uint64_t(bits) ? 0 : maskTo(x, bits) >> amount;
      write(o[0], t, r, bits);
      break;
    }
    case Op::Setp: {
      bool r;
      if (floating) {
        double x = toDouble(in.type, v(1)), y = toDouble(in.type, v(2));
        if (in.ftz && in.type == T::F32) {
          x = flush(float(x));
          y = flush(float(y));
        }
        r = compare(in.cmp, x, y);
      } else if (isSigned(in.type)) {
        r = compareInt(in.cmp, signExtend(v(1), bits), signExtend(v(2), bits));
      } else {
        r = compareInt(in.cmp, maskTo(v(1), bits), maskTo(v(2), bits));
      }
      bool q = !r;
      if (in.bop != BoolOp::None) {
        bool c = v(3) != 0;
        auto combine = [&](bool x) {
          return in.bop == BoolOp::And  ? x && c
                 : in.bop == BoolOp::Or ? x || c
                                        : x != c;
        };
        r = combine(r);
        q = combine(q);
      }
      if (o[0].kind == Operand::Pair) {
        t.r[o[0].reg] = r;
        t.r[o[0].reg2] = q;
      } else {
        t.r[o[0].reg] = r;
      }
      break;
    }
    case Op::Selp:
      write(o[0], t, v(3) ? v(1) : v(2), bits);
      break;
    case Op::Cvt: {
      if (in.type == T::F16x2 || in.type == T::BF16x2) {
        // cvt.rn.f16x2.f32 d, a, b: a in the upper half, b in the lower.
        if (in.from != T::F32)
          fault(t, "packed cvt from a type other than f32");
        Inst half = in;
        half.type = in.type == T::F16x2 ? T::F16 : T::BF16;
        uint64_t hi = convert(half, v(1)), lo = convert(half, v(2));
        write(o[0], t, (hi << 16) | lo, 32);
        break;
      }
      uint64_t r = convert(in, v(1));
      if (isSigned(
              in.type)) // a narrower result is sign-extended to the register
        write(o[0], t, uint64_t(signExtend(r, bits)), 64);
      else
        write(o[0], t, r, bits);
      break;
    }
    case Op::Cvta: {
      uint64_t a = v(1);
      uint64_t window = in.space == Space::Local ? kLocalWindow : kSharedWindow;
      if (in.space == Space::Global)
        write(o[0], t, a, 64); // generic and global addresses are the same
      else
        write(o[0], t, in.toGeneric ? a + window : a - window, bits);
      break;
    }
    case Op::Rcp:
    case Op::Sqrt:
    case Op::Rsqrt:
    case Op::Ex2:
    case Op::Lg2:
    case Op::Sin:
    case Op::Cos:
    case Op::Tanh: {
      Op op = in.op;
      auto f = [op](double x) {
        switch (op) {
        case Op::Rcp:
          return 1.0 / x;
        case Op::Sqrt:
          return std::sqrt(x);
        case Op::Rsqrt:
          return 1.0 / std::sqrt(x);
        case Op::Ex2:
          return std::exp2(x);
        case Op::Lg2:
          return std::log2(x);
        case Op::Sin:
          return std::sin(x);
        case Op::Cos:
          return std::cos(x);
        default:
          return std::tanh(x);
        }
      };
      uint64_t r;
      if (in.type == T::F32) {
        float x = asF32(v(1));
        if (in.ftz)
          x = flush(x);
        float y = op == Op::Rcp    ? 1.0f / x
                  : op == Op::Sqrt ? std::sqrt(x)
                                   : float(f(x));
        r = bitsF32(in.ftz ? flush(y) : y);
      } else {
        r = fromDouble(in.type, f(toDouble(in.type, v(1))));
      }
      write(o[0], t, r, bits);
      break;
    }
    case Op::Copysign: { // d = b with the sign of a
      uint64_t sign = uint64_t(1) << (bits - 1);
      write(o[0], t, (v(2) & ~sign) | (v(1) & sign), bits);
      break;
    }
    case Op::Bfe: {
      uint64_t a = maskTo(v(1), bits);
      unsigned pos = unsigned(v(2) & 0xff), len = unsigned(v(3) & 0xff);
      uint64_t r = 0;
      if (len) {
        unsigned msb = std::min<unsigned>(pos + len - 1, unsigned(bits) - 1);
        bool signBit = isSigned(in.type) && ((a >> msb) & 1);
        for (unsigned k = 0; k < unsigned(bits); ++k) {
          bool bit = k < len && pos + k < unsigned(bits) ? (a >> (pos + k)) & 1
                                                         : signBit;
          r |= uint64_t(bit) << k;
        }
      }
      write(o[0], t, r, bits);
      break;
    }
    case Op::Bfi: {
      uint64_t f = v(1), b = v(2);
      unsigned pos = unsigned(v(3) & 0xff), len = unsigned(v(4) & 0xff);
      uint64_t r = b;
      for (unsigned k = 0; k < len && pos + k < unsigned(bits); ++k)
        r = (r & ~(uint64_t(1) << (pos + k))) | (((f >> k) & 1) << (pos + k));
      write(o[0], t, r, bits);
      break;
    }
    case Op::Popc:
      write(o[0], t, uint64_t(__builtin_popcountll(maskTo(v(1), bits))), 32);
      break;
    case Op::Clz: {
      uint64_t x = maskTo(v(1), bits);
      write(o[0], t,
            x ? uint64_t(__builtin_clzll(x) - (64 - bits)) : uint64_t(bits),
            32);
      break;
    }
    case Op::Brev: {
      uint64_t x = v(1), r = 0;
      for (int k = 0; k < bits; ++k)
        r |= ((x >> k) & 1) << (bits - 1 - k);
      write(o[0], t, r, bits);
      break;
    }
    case Op::Prmt: { // the default mode: four byte selectors in c
      uint64_t bytes = (maskTo(v(2), 32) << 32) | maskTo(v(1), 32), c = v(3),
               r = 0;
      for (int k = 0; k < 4; ++k) {
        unsigned sel = unsigned(c >> (4 * k)) & 0xf;
        uint64_t byte = (bytes >> (8 * (sel & 7))) & 0xff;
        if (sel & 8)
          byte = (byte & 0x80) ? 0xff : 0;
        r |= byte << (8 * k);
      }
      write(o[0], t, r, 32);
      break;
    }
    case Op::Ld: {
      size_t bytes = size_t(std::max(bits, 8) / 8);
      uint64_t address =
          uint64_t(o[1].reg >= 0 ? t.r[o[1].reg] : 0) + uint64_t(o[1].imm);
      const uint8_t *p = memory(in, t, address, bytes * in.vec, Access::Read);
      for (unsigned k = 0; k < in.vec; ++k) {
        uint64_t x = loadBytes(p + k * bytes, bytes);
        if (isSigned(in.type))
          x = uint64_t(signExtend(x, bits));
        if (in.vec == 1)
          write(o[0], t, x, 64);
        else if (o[0].regs[k] >= 0)
          t.r[o[0].regs[k]] = x;
      }
      break;
    }
    case Op::St: {
      size_t bytes = size_t(std::max(bits, 8) / 8);
      uint64_t address =
          uint64_t(o[0].reg >= 0 ? t.r[o[0].reg] : 0) + uint64_t(o[0].imm);
      uint8_t data[4 * 8]; // at most v4 of 64 bits
      if (bytes * in.vec > sizeof(data))
        fault(t, "a store wider than 32 bytes");
      for (unsigned k = 0; k < in.vec; ++k) {
        uint64_t x = in.vec == 1 ? v(1) : element(o[1], k, t);
        std::memcpy(data + k * bytes, &x, bytes);
      }
      uint8_t *p = memory(in, t, address, bytes * in.vec, Access::Write, data);
      if (in.space == Space::Param)
        fault(t, "a store to .param");
      std::memcpy(p, data, bytes * in.vec);
      break;
    }
    case Op::Atom: {
      size_t at = in.atomReturns ? 1 : 0;
      size_t bytes = size_t(bits / 8);
      uint64_t address =
          uint64_t(o[at].reg >= 0 ? t.r[o[at].reg] : 0) + uint64_t(o[at].imm);
      uint8_t *p = memory(in, t, address, bytes, Access::Atomic);
      uint64_t old =
          atomic(in, t, p, v(at + 1), in.atom == AtomOp::Cas ? v(at + 2) : 0);
      if (in.atomReturns)
        write(o[0], t, old, bits);
      break;
    }
    }
    if (t.linear == traceThread && traced)
      traceLine(in, t);
    ++t.pc;
  }
  t.state = Thread::Done; // ran off the end, as after ret
}

} // namespace

std::unique_ptr<Module>
shardflow::standin::ptx::parse(const std::string &text) {
  return Parser(text).module();
}

void shardflow::standin::ptx::run(const Kernel &kernel, const Launch &launch,
                                  const RangeCheck &global) {
  if (!kernel.problem.empty() || !kernel.program)
    throw Fault(Fault::Kind::Other,
                "kernel " + kernel.name +
                    " cannot be interpreted: " + kernel.problem);
  if (launch.parameters.size() != kernel.parameterBytes)
    throw Fault(Fault::Kind::Other,
                "kernel " + kernel.name + ": " +
                    std::to_string(launch.parameters.size()) +
                    " bytes of parameters, expected " +
                    std::to_string(kernel.parameterBytes));
  BlockRunner runner(kernel, launch, global);
  for (unsigned z = 0; z < launch.grid[2]; ++z)
    for (unsigned y = 0; y < launch.grid[1]; ++y)
      for (unsigned x = 0; x < launch.grid[0]; ++x)
        runner.run(x, y, z);
}
