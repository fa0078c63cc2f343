"""Run Shardflow's generated GPU kernels on the CPU, for tests without a GPU.

``convert-rt-to-gpu`` turns elementwise and row-reduction kernels into
``gpu.func`` code. This module executes that code, as printed by
``shard-opt --mlir-print-op-generic``, with numpy: every SSA value holds one
lane per GPU thread of the whole grid (a vector value one row of elements
per thread; a vector access whose address is not a multiple of its stated
alignment raises MisalignedAccess, as a GPU faults), ``scf.for``/``scf.if`` run with
per-lane masks, ``gpu.all_reduce`` reduces over each block's lanes, and
memory is one flat numpy array per buffer. Shared memory records who
touched each word since the last ``gpu.barrier``, so a race that lockstep
execution would hide raises SharedMemoryRace. It also runs the host side
(``rt.alloc``, ``rt.view``, ``rt.constant``, ``rt.launch``) of programs made
only of generated kernels, so a test can compare a whole compiled program
with onnxruntime.

It checks what the compiler generates (indexing, broadcasting, fusion,
reductions, rounding to the stored type) with the same IR the NVVM backend
receives; it does not check the NVVM lowering itself, which is MLIR's. Only
the ops the generator emits are understood: anything else raises.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

_DTYPES = {
    "f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
    "i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
    "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
    "index": np.int64,
}


def _unsigned(v):
    """Integer lanes read as unsigned (two's complement), as the `u` forms
    of arith operations do; booleans stay."""
    v = np.asarray(v)
    if v.dtype.kind == "i":
        return v.view(np.dtype(f"u{v.dtype.itemsize}"))
    return v


@dataclass
class Op:
    name: str
    results: list[str]
    operands: list[str]
    props: str
    attrs: str
    types: str
    regions: list[list["Block"]] = field(default_factory=list)


@dataclass
class Block:
    args: list[tuple[str, str]]
    ops: list[Op]


_OP_RE = re.compile(r'^(?:(?P<res>%[\w.#:]+(?:, %[\w.#]+)*) = )?"(?P<name>[\w.]+)"\((?P<ops>[^)]*)\)(?P<rest>.*)$')


def _split_results(text: str | None) -> list[str]:
    if not text:
        return []
    out = []
    for r in text.split(", "):
        if ":" in r:
            base, count = r.split(":")
            out += [f"{base}#{i}" for i in range(int(count))]
        else:
            out.append(r)
    return out


def _take_braced(s: str, open_: str, close: str) -> tuple[str, str]:
    """Splits `s` (starting with `open_`) after its matching `close`."""
    depth = 0
    i = 0
    while i < len(s):
        if s.startswith(open_, i):
            depth += 1
            i += len(open_)
            continue
        if s.startswith(close, i):
            depth -= 1
            i += len(close)
            if depth == 0:
                return s[:i], s[i:]
            continue
        if s[i] == '"':
            j = s.index('"', i + 1)
            i = j + 1
            continue
        i += 1
    raise ValueError(f"unbalanced {open_!r} in {s!r}")


class _Parser:
    def __init__(self, text: str):
        self.lines = [l.strip() for l in text.splitlines() if l.strip()]
        self.i = 0

    def parse_ops(self) -> list[Op]:
        ops = []
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.startswith("})") or line.startswith("}, {") or line == "}":
                return ops
            if line.startswith("^"):
                return ops
            ops.append(self.parse_op())
        return ops

    def parse_op(self) -> Op:
        line = self.lines[self.i]
        self.i += 1
        m = _OP_RE.match(line)
        if not m:
            raise ValueError(f"cannot parse MLIR line: {line}")
        rest = m.group("rest").strip()
        props = ""
        if rest.startswith("<{"):
            props, rest = _take_braced(rest, "<{", "}>")
            rest = rest.strip()
        op = Op(m.group("name"), _split_results(m.group("res")),
                [o.strip() for o in m.group("ops").split(",") if o.strip()], props, "", "")
        if rest.startswith("({"):
            # Regions: blocks until "})"; further regions follow "}, {".
            while True:
                op.regions.append(self.parse_region())
                closing = self.lines[self.i]
                self.i += 1
                if closing.startswith("}, {"):
                    continue
                rest = closing[2:].strip()
                break
        if rest.startswith("{"):
            op.attrs, rest = _take_braced(rest, "{", "}")
            rest = rest.strip()
        op.types = rest.lstrip(":").strip()
        return op

    def parse_region(self) -> list[Block]:
        blocks = []
        if self.lines[self.i].startswith(("})", "}, {")):
            return [Block([], [])]  # an empty region
        while True:
            line = self.lines[self.i]
            args = []
            if line.startswith("^"):
                self.i += 1
                inner = line[line.index("(") + 1:line.rindex(")")] if "(" in line else ""
                for a in filter(None, [x.strip() for x in inner.split(", %")]):
                    name, ty = a.split(":", 1)
                    args.append(("%" + name.lstrip("%"), ty.strip()))
            blocks.append(Block(args, self.parse_ops()))
            if not self.lines[self.i].startswith("^"):
                return blocks


def parse(text: str) -> list[Op]:
    p = _Parser(text)
    ops = p.parse_ops()
    if ops and ops[0].name == "builtin.module":
        return ops[0].regions[0][0].ops
    return ops


def _attr(props: str, key: str) -> str | None:
    m = re.search(rf"\b{key} = ", props)
    if not m:
        return None
    s = props[m.end():]
    depth = 0
    for i, ch in enumerate(s):
        if ch in "<[({":
            depth += 1
        elif ch in ">])}":
            if depth == 0:
                return s[:i].strip()
            depth -= 1
        elif ch == "," and depth == 0:
            return s[:i].strip()
    return s.strip()


def _memref(ty: str) -> tuple[tuple[int, ...], str]:
    m = re.match(r"memref<((?:\d+x)*)(\w+)>", ty.strip())
    if not m:
        raise ValueError(f"not a static memref type: {ty}")
    dims = tuple(int(d) for d in m.group(1).split("x") if d)
    return dims, m.group(2)


def _result_type(op: Op) -> str:
    return op.types.split("->")[-1].strip()


def _bf16_round(x: np.ndarray) -> np.ndarray:
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


_CMPF = {0: lambda a, b: np.zeros_like(a, bool), 1: np.equal, 2: np.greater, 3: np.greater_equal,
         4: np.less, 5: np.less_equal, 6: lambda a, b: (a != b) & ~np.isnan(a) & ~np.isnan(b),
         7: lambda a, b: ~np.isnan(a) & ~np.isnan(b), 8: lambda a, b: (a == b) | np.isnan(a) | np.isnan(b),
         9: lambda a, b: ~(a <= b), 10: lambda a, b: ~(a < b), 11: lambda a, b: ~(a >= b),
         12: lambda a, b: ~(a > b), 13: np.not_equal, 14: lambda a, b: np.isnan(a) | np.isnan(b),
         15: lambda a, b: np.ones_like(a, bool)}
_CMPI = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater,
         5: np.greater_equal, 6: np.less, 7: np.less_equal, 8: np.greater, 9: np.greater_equal}


class WarpDivergence(RuntimeError):
    """A warp-wide operation (a shuffle) that only some lanes of a warp
    reached: the others' values are undefined on a GPU."""


class SharedMemoryRace(RuntimeError):
    """Two threads of a block touched one shared-memory word between two
    barriers, at least one of them writing: on a GPU the outcome depends on
    timing. The emulator runs every thread in lockstep, so it would compute
    one outcome and hide the race; it refuses instead."""


class _Shared:
    """A workgroup (shared memory) buffer: one copy per thread block.

    Between two barriers it records, per word, the thread that wrote it and
    the thread that read it (or that several did), so that a read of
    another thread's write, or a write over another thread's read or
    write, raises SharedMemoryRace: lockstep execution would otherwise
    order them as a GPU does not promise to."""

    _NONE, _MANY = -1, -2

    def __init__(self, length: int, dtype, blocks: int):
        self.length = length
        self.data = np.zeros(length * blocks, dtype)
        self.writer = np.full(length * blocks, self._NONE, np.int64)
        self.reader = np.full(length * blocks, self._NONE, np.int64)

    def barrier(self) -> None:
        self.writer.fill(self._NONE)
        self.reader.fill(self._NONE)

    def _race(self, what: str, words: np.ndarray, lanes: np.ndarray, others: np.ndarray):
        bad = (others != self._NONE) & (others != lanes)
        if bad.any():
            w = int(np.flatnonzero(bad)[0])
            raise SharedMemoryRace(
                f"shared memory word {int(words[w]) % self.length} of block "
                f"{int(words[w]) // self.length}: thread {int(lanes[w])} {what} with no "
                "barrier in between")

    def read(self, words: np.ndarray, lanes: np.ndarray) -> np.ndarray:
        self._race("reads what another thread wrote", words, lanes, self.writer[words])
        # Several readers of one word are fine; remember whether there were.
        seen = self.reader[words]
        first = seen == self._NONE
        self.reader[words[first]] = lanes[first]
        mixed = ~first & (seen != lanes)
        self.reader[words[mixed]] = self._MANY
        # Lanes of this very load that share a word are several readers too.
        order = np.lexsort((lanes, words))
        w, l = words[order], lanes[order]
        self.reader[w[1:][(w[1:] == w[:-1]) & (l[1:] != l[:-1])]] = self._MANY
        return self.data[words]

    def write(self, words: np.ndarray, lanes: np.ndarray, values: np.ndarray) -> None:
        self._race("writes what another thread read", words, lanes, self.reader[words])
        self._race("writes what another thread wrote", words, lanes, self.writer[words])
        uniq, counts = np.unique(words, return_counts=True)
        if (counts > 1).any():
            word = int(uniq[counts > 1][0])
            raise SharedMemoryRace(
                f"shared memory word {word % self.length} of block {word // self.length}: "
                "written by several threads at once")
        self.writer[words] = lanes
        self.data[words] = values


class Kernel:
    """One gpu.func, run over a whole grid at once."""

    def __init__(self, op: Op):
        self.op = op
        self.block = op.regions[0][0]

    def run(self, buffers: list[np.ndarray], grid: int, block: int) -> None:
        lanes = grid * block
        env: dict = {}
        for (name, ty), buf in zip(self.block.args, buffers):
            # Arguments are signless: an unsigned buffer arrives as the
            # signless integers of its width (a view of the same bytes).
            elem = _DTYPES[_memref(ty)[1]]
            env[name] = buf.view(elem) if buf.dtype != elem else buf
        for name, ty in self.block.args[len(buffers):]:
            if "workgroup" not in ty:
                raise ValueError(f"kernel argument {name} has no buffer")
            shape, elem = _memref(ty.split(", #gpu")[0] + ">")
            env[name] = _Shared(int(np.prod(shape)), _DTYPES[elem], grid)
        self.lanes, self.block_size = lanes, block
        self.lanes_ids = np.arange(lanes, dtype=np.int64)
        self.tid = self.lanes_ids % block
        self.bid = self.lanes_ids // block
        self._run_ops(self.block.ops, env, np.ones(lanes, bool))

    def _run_ops(self, ops: list[Op], env: dict, mask: np.ndarray) -> list[np.ndarray] | None:
        for op in ops:
            out = self._step(op, env, mask)
            if op.name in ("scf.yield",):
                return out
            if out is not None:
                for r, v in zip(op.results, out if isinstance(out, list) else [out]):
                    env[r] = v
        return None

    def _lane(self, v) -> np.ndarray:
        v = np.asarray(v)
        return np.broadcast_to(v, (self.lanes,)) if v.ndim == 0 else v

    def _step(self, op: Op, env: dict, mask: np.ndarray):
        n = op.name
        a = [env[o] for o in op.operands]
        rt = _result_type(op)
        if n == "gpu.block_id":
            return self.bid
        if n == "gpu.thread_id":
            return self.tid
        if n == "gpu.block_dim":
            return np.full(self.lanes, self.block_size, np.int64)
        if n == "arith.constant":
            text = _attr(op.props, "value")
            if text in ("true", "false"):
                return np.full(self.lanes, text == "true")
            val, ty = text.rsplit(" : ", 1)
            if ty == "i1":
                return np.full(self.lanes, val == "true")
            dt = _DTYPES[ty]
            if ty.startswith("f") or ty == "bf16":
                return np.full(self.lanes, float(val.replace("0x", "")) if not val.startswith("0x") else
                               np.frombuffer(int(val, 16).to_bytes(8 if ty == "f64" else 4, "little"),
                                             np.float64 if ty == "f64" else np.float32)[0], dt)
            return np.full(self.lanes, int(val), dt)
        if n in ("arith.addi", "arith.addf"):
            return a[0] + a[1]
        if n in ("arith.subi", "arith.subf"):
            return a[0] - a[1]
        if n in ("arith.muli", "arith.mulf"):
            return a[0] * a[1]
        if n == "arith.divf":
            with np.errstate(divide="ignore", invalid="ignore"):
                return a[0] / a[1]
        if n in ("arith.divui", "arith.remui"):
            x, y = _unsigned(a[0]), _unsigned(a[1])
            r = x // y if n == "arith.divui" else x % y
            return r.astype(x.dtype).view(np.asarray(a[0]).dtype)
        if n in ("arith.divsi", "arith.remsi"):
            # Signed division truncates toward zero (C, PTX), not down.
            with np.errstate(divide="ignore"):
                q = a[0] // np.where(a[1] == 0, 1, a[1])
            q = q + ((q < 0) & (q * a[1] != a[0]))
            return q if n == "arith.divsi" else a[0] - q * a[1]
        if n == "arith.index_cast":
            return a[0].astype(_DTYPES[rt])
        if n == "arith.negf":
            return -a[0]
        if n == "arith.maximumf":
            return np.maximum(a[0], a[1])
        if n == "arith.minimumf":
            return np.minimum(a[0], a[1])
        if n == "arith.maxsi":
            return np.maximum(a[0], a[1])
        if n == "arith.minsi":
            return np.minimum(a[0], a[1])
        if n == "arith.shrui":
            x = _unsigned(a[0])
            return (x >> np.asarray(a[1]).astype(x.dtype)).view(np.asarray(a[0]).dtype)
        if n in ("arith.maxui", "arith.minui"):
            f = np.maximum if n == "arith.maxui" else np.minimum
            return f(_unsigned(a[0]), _unsigned(a[1])).view(np.asarray(a[0]).dtype)
        if n in ("arith.andi", "arith.xori", "arith.ori"):
            return {"arith.andi": np.bitwise_and, "arith.xori": np.bitwise_xor,
                    "arith.ori": np.bitwise_or}[n](a[0], a[1])
        if n == "arith.bitcast":
            return np.ascontiguousarray(self._lane(a[0])).view(_DTYPES[rt])
        if n == "arith.select":
            return np.where(a[0], a[1], a[2])
        if n == "arith.cmpf":
            return _CMPF[int(_attr(op.props, "predicate").split()[0])](a[0], a[1])
        if n == "arith.cmpi":
            pred = int(_attr(op.props, "predicate").split()[0])
            x, y = (_unsigned(a[0]), _unsigned(a[1])) if pred >= 6 else (a[0], a[1])
            return _CMPI[pred](x, y)
        if n == "arith.extf":
            return a[0].astype(_DTYPES[rt])
        if n == "arith.truncf":
            if rt == "bf16":
                return a[0].astype(ml_dtypes.bfloat16)
            return a[0].astype(_DTYPES[rt])
        if n == "arith.trunci" and rt == "i1":  # the low bit, not "nonzero"
            return (np.asarray(a[0]) & 1).astype(bool)
        if n in ("arith.sitofp", "arith.extsi", "arith.trunci"):
            return a[0].astype(_DTYPES[rt])
        if n in ("arith.uitofp", "arith.extui"):
            return _unsigned(a[0]).astype(_DTYPES[rt])
        if n in ("arith.fptosi", "arith.fptoui"):
            # Out of range is poison in arith; generated code never keeps it.
            with np.errstate(invalid="ignore"):
                x = np.where(np.isfinite(a[0]), a[0], 0)
                if n == "arith.fptoui":
                    u = np.dtype(f"u{np.dtype(_DTYPES[rt]).itemsize}")
                    return np.clip(x, 0, None).astype(u).view(_DTYPES[rt])
                return x.astype(_DTYPES[rt])
        if n.startswith("math."):
            x = a[0]
            with np.errstate(all="ignore"):
                f = {"math.exp": np.exp, "math.log": np.log, "math.tanh": np.tanh,
                     "math.sqrt": np.sqrt, "math.absf": np.abs, "math.absi": np.abs,
                     "math.rsqrt": lambda v: (1 / np.sqrt(v.astype(np.float64))).astype(v.dtype),
                     "math.erf": lambda v: np.vectorize(math.erf, otypes=[v.dtype])(v)}.get(n)
                if n == "math.powf":
                    return np.power(a[0], a[1])
                if f is None:
                    raise NotImplementedError(f"emulator: {n}")
                return f(x)
        if n == "memref.load":
            buf, idx = a[0], a[1]
            if isinstance(buf, _Shared):
                words = self._lane(idx) + self.bid * buf.length
                out = np.zeros(self.lanes, buf.data.dtype)
                out[mask] = buf.read(words[mask], self.lanes_ids[mask])
                return out
            safe = np.where(mask, idx, 0)
            return buf[safe]
        if n == "memref.store":
            val, buf, idx = a[0], a[1], a[2]
            val = self._lane(val)
            idx = self._lane(idx)
            if isinstance(buf, _Shared):
                words = idx + self.bid * buf.length
                buf.write(words[mask], self.lanes_ids[mask], val[mask].astype(buf.data.dtype))
                return None
            buf[idx[mask]] = val[mask].astype(buf.dtype)
            return None
        if n in ("vector.load", "vector.store"):
            # Each lane's vector: `width` consecutive elements from its index.
            load = n == "vector.load"
            buf, idx = (a[0], a[1]) if load else (a[1], a[2])
            width = int(re.search(r"vector<(\d+)x", op.types).group(1))
            idx = self._lane(idx)
            data = buf.data if isinstance(buf, _Shared) else buf
            align = int((_attr(op.props, "alignment") or str(data.dtype.itemsize)).split()[0])
            bad = mask & ((idx * data.dtype.itemsize) % align != 0)
            if bad.any():
                raise MisalignedAccess(
                    f"{n} of {width} elements at element {int(idx[bad][0])}: not "
                    f"{align}-byte aligned")
            at = idx[:, None] + np.arange(width)
            if isinstance(buf, _Shared):
                words = (at + (self.bid * buf.length)[:, None])[mask]
                lanes = np.repeat(self.lanes_ids[mask], width)
                if load:
                    out = np.zeros((self.lanes, width), data.dtype)
                    out[mask] = buf.read(words.ravel(), lanes).reshape(-1, width)
                    return out
                buf.write(words.ravel(), lanes, a[0][mask].astype(data.dtype).ravel())
                return None
            if load:
                return buf[np.where(mask[:, None], at, 0)]
            buf[at[mask]] = a[0][mask].astype(buf.dtype)
            return None
        if n == "vector.extract":
            pos = int(re.search(r"static_position = array<i64: (\d+)>", op.props).group(1))
            return a[0][:, pos]
        if n == "vector.from_elements":
            return np.stack([self._lane(x) for x in a], axis=1)
        if n == "gpu.barrier":
            # Every thread of a block must reach it: one that skips it (a
            # barrier under a condition that differs within the block)
            # deadlocks or corrupts a GPU run.
            per_block = mask.reshape(-1, self.block_size)
            if (per_block.any(axis=1) & ~per_block.all(axis=1)).any():
                raise SharedMemoryRace("gpu.barrier reached by only part of a block")
            for v in env.values():
                if isinstance(v, _Shared):
                    v.barrier()
            return None
        if n == "scf.if":
            cond = self._lane(a[0])
            self._run_ops(op.regions[0][0].ops, env, mask & cond)
            return None
        if n == "scf.for":
            lb, ub, step = (self._lane(x) for x in a[:3])
            carried = [self._lane(x).copy() for x in a[3:]]
            body = op.regions[0][0]
            k = 0
            while True:
                iv = lb + k * step
                active = mask & (iv < ub)
                if not active.any():
                    break
                inner = dict(env)
                inner[body.args[0][0]] = iv
                for (name, _), v in zip(body.args[1:], carried):
                    inner[name] = v
                out = self._run_ops(body.ops, inner, active)
                carried = [np.where(active, self._lane(o), c) for o, c in zip(out or [], carried)]
                k += 1
            return carried
        if n == "scf.yield":
            return [env[o] for o in op.operands]
        if n == "gpu.shuffle":
            # xor shuffles within 32-lane warps (blocks are whole warps, so
            # a lane's id within its warp is its global id's low 5 bits).
            mode = re.search(r"shuffle_mode (\w+)", op.props).group(1)
            width = self._lane(a[2])
            if mode != "xor" or self.block_size % 32 or (width != 32).any():
                raise NotImplementedError(f"emulator: gpu.shuffle {mode} of width {width[0]}")
            # Every lane of a warp must take part: on a GPU a shuffle from
            # a lane that is not there reads an undefined value.
            per_warp = mask.reshape(-1, 32)
            if (per_warp.any(axis=1) & ~per_warp.all(axis=1)).any():
                raise WarpDivergence("gpu.shuffle reached by only part of a warp")
            source = self.lanes_ids ^ self._lane(a[1]).astype(np.int64)
            return [self._lane(a[0])[source], np.ones(self.lanes, bool)]
        if n == "gpu.all_reduce":
            kind = re.search(r"all_reduce_op (\w+)", op.props).group(1)
            v = self._lane(a[0]).reshape(-1, self.block_size)
            r = {"add": np.sum, "maximumf": np.max, "minimumf": np.min, "maxsi": np.max,
                 "minsi": np.min}[kind](v, axis=1)
            return np.repeat(r.astype(v.dtype), self.block_size)
        if n == "gpu.return":
            return None
        raise NotImplementedError(f"emulator: {n}")


class MisalignedAccess(RuntimeError):
    """A vector load or store at an address that is not a multiple of its
    stated alignment: a GPU faults ("misaligned address")."""


class IndexOutOfRange(RuntimeError):
    """A kernel set its status word (code 1): what the CUDA runtime reports
    as an error."""


class DivisionByZero(RuntimeError):
    """A kernel set its status word (code 2): an integer division by zero."""


def _dense(text: str, shape: tuple[int, ...], dt) -> np.ndarray:
    body = re.match(r"dense<(.*)>", text.rsplit(" : ", 1)[0]).group(1)
    if body.startswith('"0x'):
        # Raw little-endian bytes (MLIR's form for large constants).
        raw = bytes.fromhex(body.strip('"')[2:])
        count = int(np.prod(shape))
        if dt == np.bool_ and len(raw) > 1:
            # i1 elements are packed, eight to a byte, the first in bit 0.
            bits = np.unpackbits(np.frombuffer(raw, np.uint8), bitorder="little")
            return bits[:count].astype(bool).reshape(shape)
        storage = np.uint8 if dt == np.bool_ else dt
        arr = np.frombuffer(raw, dtype=storage).astype(dt)
        return arr.reshape(shape) if arr.size == int(np.prod(shape)) else \
            np.broadcast_to(arr.reshape(()), shape).copy()
    if re.fullmatch(r"0x[0-9A-Fa-f]+", body):
        # A splat float given by its bits (MLIR prints inf and NaN so).
        bits = np.array([int(body, 16)], dtype=f"u{np.dtype(dt).itemsize}")
        return np.broadcast_to(bits.view(dt).reshape(()), shape).copy()
    if body in ("true", "false"):
        vals = [body == "true"]
    else:
        body = body.replace("true", "1").replace("false", "0")
        vals = [float(x) for x in re.findall(r"[-+0-9.eE]+|nan|inf", body)]
    arr = np.array(vals, dtype=np.float64).astype(dt)
    if arr.size == int(np.prod(shape)):
        return arr.reshape(shape)
    return np.broadcast_to(arr.reshape(()), shape).copy()  # a splat


def _params(props: str) -> dict:
    """The `params` dictionary of an rt.kernel, as Python values."""
    text = _attr(props, "params")
    out: dict = {}
    if not text:
        return out
    body = text.strip()[1:-1]
    depth, start, items = 0, 0, []
    for i, ch in enumerate(body):
        if ch in "<[({":
            depth += 1
        elif ch in ">])}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(body[start:i])
            start = i + 1
    items.append(body[start:])
    for item in filter(None, (x.strip() for x in items)):
        key, value = (x.strip() for x in item.split(" = ", 1))
        if value in ("true", "false"):
            out[key] = value == "true"
        elif value.startswith("array<"):
            inner = value[value.index(":") + 1:-1] if ":" in value else ""
            out[key] = [int(x) for x in inner.split(",") if x.strip()]
        elif value.startswith('"'):
            out[key] = value.strip('"')
        else:
            number = value.split(" : ")[0]
            out[key] = float(number) if any(c in number for c in ".eEn") else int(number)
    return out


def _attention(q, k, v, mask, p):
    """nn.attention in float64: 4-D [B, H, S, D], or 3-D with head counts."""
    three_d = q.ndim == 3
    if three_d:
        hq, hkv = p["q_num_heads"], p["kv_num_heads"]
        split = lambda t, h: t.reshape(t.shape[0], t.shape[1], h, -1).transpose(0, 2, 1, 3)
        q, k, v = split(q, hq), split(k, hkv), split(v, hkv)
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = p.get("scale") or 1 / np.sqrt(q.shape[-1])
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if p.get("softcap", 0) > 0:
        s = p["softcap"] * np.tanh(s / p["softcap"])
    keep = np.ones(s.shape, bool)
    if p.get("is_causal"):
        keep &= np.tril(np.ones(s.shape[-2:], bool))
    if mask is not None:
        if mask.dtype == np.bool_:
            keep &= np.broadcast_to(mask, s.shape)
        else:
            s = s + np.broadcast_to(mask.astype(np.float64), s.shape)
            keep &= np.broadcast_to(mask != -np.inf, s.shape)
    s = np.where(keep, s, -np.inf)
    best = np.max(s, axis=-1, keepdims=True)
    e = np.where(keep, np.exp(s - np.where(np.isfinite(best), best, 0)), 0)
    total = e.sum(-1, keepdims=True)
    out = np.where(total > 0, (e / np.where(total > 0, total, 1)) @ v, 0)
    if three_d:
        out = out.transpose(0, 2, 1, 3).reshape(out.shape[0], out.shape[2], -1)
    return out


def _host_kernel(name: str, ins: list[np.ndarray], out_shapes: list[tuple], p: dict,
                 rank: int = 0):
    """Reference (numpy) versions of the kernels the CUDA runtime supplies."""
    if name == "matmul":  # trans_b: a 2-D B stored [N, K]
        r = np.matmul(ins[0].astype(np.float64), ins[1].T if p.get("trans_b") else ins[1])
        epilogue = p.get("epilogue", "")
        if p.get("residual"):  # cuBLASLt's C (the last input), beta 1
            r = r + ins[-1]
        if epilogue:  # cuBLASLt's: bias over the last dimension, then gelu(tanh)/relu
            r = r + ins[2]
            if epilogue == "gelu_bias":
                r = 0.5 * r * (1 + np.tanh(np.sqrt(2 / np.pi) * (r + 0.044715 * r ** 3)))
            elif epilogue == "relu_bias":
                r = np.maximum(r, 0)
        return [r]
    if name == "gemm":
        a = ins[0].T if p.get("trans_a") else ins[0]
        b = ins[1].T if p.get("trans_b") else ins[1]
        r = p.get("alpha", 1.0) * (a.astype(np.float64) @ b)
        if len(ins) > 2:
            r = r + p.get("beta", 1.0) * ins[2]
        return [r]
    if name == "transpose":
        return [np.transpose(ins[0], p["perm"])]
    if name == "gather":
        # Indices address axis_size rows; a block of a split (vocabulary-
        # parallel) axis holds those from its rank's start, zeros elsewhere.
        axis = p.get("axis", 0)
        rows = ins[0].shape[axis]
        start = p["axis_starts"][rank] if "axis_starts" in p else 0
        idx = ins[1].astype(np.int64)
        idx = np.where(idx < 0, idx + p.get("axis_size", rows), idx) - start
        mine = (idx >= 0) & (idx < rows)
        got = np.take(ins[0], np.where(mine, idx, 0), axis=axis)
        mask = mine.reshape((1,) * axis + mine.shape + (1,) * (ins[0].ndim - axis - 1))
        return [np.where(mask, got, 0).astype(ins[0].dtype)]
    if name == "split":
        cuts = np.cumsum(p["sizes"])[:-1]
        return np.split(ins[0], cuts, axis=p["axis"])
    if name == "expand":
        return [np.broadcast_to(ins[0], out_shapes[0])]
    if name == "concat":
        return [np.concatenate(ins, axis=p["axis"])]
    if name == "slice":  # ONNX's clamping rules, per listed axis
        x = ins[0]
        for axis, st, en, sp in zip(p["axes"], p["starts"], p["ends"], p["steps"]):
            dim = x.shape[axis]
            st, en = (st + dim if st < 0 else st), (en + dim if en < 0 else en)
            st, en = ((min(max(st, 0), dim), min(max(en, 0), dim)) if sp > 0 else
                      (min(max(st, 0), dim - 1), min(max(en, -1), dim - 1)))
            x = np.take(x, np.arange(st, en, sp), axis=axis)
        return [x]
    if name == "pad":  # negative pads crop first
        x, pads = ins[0], p["pads"]
        rank = x.ndim
        x = x[tuple(slice(max(-pads[d], 0), x.shape[d] - max(-pads[rank + d], 0))
                    for d in range(rank))]
        widths = [(max(pads[d], 0), max(pads[rank + d], 0)) for d in range(rank)]
        mode = p.get("mode", "constant")
        if mode == "constant":
            return [np.pad(x, widths, constant_values=p.get("value", 0.0))]
        return [np.pad(x, widths, mode=mode)]
    if name == "attention":
        q, k, v = ins[:3]
        if "packed_qkv" in p:  # consecutive column blocks of one [B, S, W] buffer
            wq, wk, _ = p["packed_qkv"]
            q, k, v = q[..., :wq], q[..., wq:wq + wk], q[..., wq + wk:]
        return [_attention(q, k, v, ins[3] if len(ins) > 3 else None, p)]
    raise NotImplementedError(f"emulator: runtime kernel {name}")


def _rank_lists(text: str) -> list[list[int]]:
    """`[array<i64: 0, 1>, array<i64: 2, 3>]` as lists."""
    return [[int(x) for x in m.split(",") if x.strip()]
            for m in re.findall(r"array<i64:([^>]*)>", text or "")]


def _reduce(arrays: list[np.ndarray], how: str) -> np.ndarray:
    stack = np.stack([a.astype(np.float64) if a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16
                      else a for a in arrays])
    return {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[how](stack, axis=0)


def _collective(op: Op, envs: list[dict], shapes: dict) -> None:
    """One rt collective over every rank's buffers at once."""
    src, dst = op.operands[0], op.operands[-1]
    world = len(envs)
    get = lambda r: envs[r][src].reshape(shapes[src])

    def put(r, value):
        envs[r][dst][:] = np.asarray(value).reshape(-1).astype(envs[r][dst].dtype)

    if op.name == "rt.local_slice":
        starts = _rank_lists(_attr(op.props, "starts"))
        for r in range(world):
            index = tuple(slice(s0, s0 + n) for s0, n in zip(starts[r], shapes[dst]))
            put(r, get(r)[index])
        return
    if op.name == "rt.collective_permute":
        pairs = _rank_lists("array<i64:" + (_attr(op.props, "pairs") or "").split(":", 1)[-1])
        flat = pairs[0] if pairs else []
        received = {flat[i + 1]: flat[i] for i in range(0, len(flat) - 1, 2)}
        values = [get(r).copy() for r in range(world)]
        for r in range(world):
            put(r, values[received[r]] if r in received else np.zeros(shapes[dst]))
        return
    groups = _rank_lists(_attr(op.props, "groups"))
    values = [get(r).copy() for r in range(world)]
    for group in groups:
        members = [values[r] for r in group]
        if op.name == "rt.all_reduce":
            total = _reduce(members, (_params_text(op, "reduction") or "sum"))
            for r in group:
                put(r, total)
        elif op.name == "rt.all_gather":
            dim = int(_params_text(op, "dim"))
            whole = np.concatenate(members, axis=dim)
            for r in group:
                put(r, whole)
        elif op.name == "rt.reduce_scatter":
            dim = int(_params_text(op, "dim"))
            total = _reduce(members, _params_text(op, "reduction") or "sum")
            for k, r in enumerate(group):
                put(r, np.split(total, len(group), axis=dim)[k])
        elif op.name == "rt.all_to_all":
            split, concat = int(_params_text(op, "split_dim")), int(_params_text(op, "concat_dim"))
            pieces = [np.split(m, len(group), axis=split) for m in members]
            for k, r in enumerate(group):
                put(r, np.concatenate([pieces[j][k] for j in range(len(group))], axis=concat))
        else:
            raise NotImplementedError(f"emulator: {op.name}")


def _params_text(op: Op, key: str) -> str | None:
    v = _attr(op.props, key)
    return None if v is None else v.split(" : ")[0].strip('"')


def _result_columns(func_attrs: str, count: int) -> list[int]:
    """Per result of a function, its `rt.columns` (a padded GEMM result
    returned as it is: the leading elements of each row that are the
    output), 0 where it has none."""
    columns = [0] * count
    start = func_attrs.find("res_attrs = [")
    if start < 0:
        return columns
    depth, i, current, entries = 0, start + len("res_attrs = ["), "", []
    while i < len(func_attrs):
        ch = func_attrs[i]
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            if depth == 0:
                break
            depth -= 1
            if depth == 0 and ch == "}":
                entries.append(current + ch)
                current = ""
                i += 1
                continue
        if depth > 0:
            current += ch
        i += 1
    for r, entry in enumerate(entries[:count]):
        m = re.search(r"rt\.columns = (\d+)", entry)
        columns[r] = int(m.group(1)) if m else 0
    return columns


def run_program(mlir_generic: str, inputs: list[np.ndarray],
                weights: dict[str, np.ndarray] | None = None,
                all_ranks: bool = False) -> list:
    """Runs `main` of an rt program on every rank of its world
    (`rt.world_size`) in lockstep: generated kernels as the GPU would, the
    runtime's kernels (matmul, attention, data movement) with numpy
    references, collectives by combining the ranks' buffers, and rt.weight
    (or each rank's slice of it) from `weights` by name. Returns rank 0's
    outputs, or every rank's with `all_ranks`."""
    top = parse(mlir_generic)
    kernels: dict[str, Kernel] = {}
    main = None
    for op in top:
        if op.name == "gpu.module":
            mod = re.search(r'sym_name = "(\w+)"', op.props + op.attrs).group(1)
            for f in op.regions[0][0].ops:
                if f.name == "gpu.func":
                    name = re.search(r'sym_name = "(\w+)"', f.props + f.attrs).group(1)
                    kernels[f"@{mod}::@{name}"] = Kernel(f)
        elif op.name == "func.func" and 'sym_name = "main"' in op.props + op.attrs:
            main = op
    if main is None:
        raise ValueError("no main function")
    world_attr = re.search(r"rt.world_size = (\d+)", main.attrs + main.props)
    world = int(world_attr.group(1)) if world_attr else 1
    body = main.regions[0][0]
    envs: list[dict] = [{} for _ in range(world)]
    shapes: dict[str, tuple] = {}
    for (name, ty), x in zip(body.args, inputs):
        shape, elem = _memref(ty)
        for env in envs:
            env[name] = np.ascontiguousarray(x, dtype=_DTYPES[elem]).reshape(-1).copy()
        shapes[name] = shape
    for op in body.ops:
        if op.name in ("rt.all_reduce", "rt.all_gather", "rt.reduce_scatter", "rt.all_to_all",
                       "rt.collective_permute", "rt.local_slice"):
            _collective(op, envs, shapes)
            continue
        if op.name == "func.return":
            columns = _result_columns(main.props + main.attrs, len(op.operands))
            outs = [[env[o].reshape(shapes[o])[..., :c] if c else env[o].reshape(shapes[o])
                     for o, c in zip(op.operands, columns)] for env in envs]
            return outs if all_ranks else outs[0]
        for rank, env in enumerate(envs):
            _host_step(op, env, shapes, kernels, weights, rank)
    raise ValueError("main has no return")


def _host_step(op: Op, env: dict, shapes: dict, kernels: dict, weights, rank: int) -> None:
    if op.name == "rt.alloc":
        shape, elem = _memref(_result_type(op))
        # The runtime does not clear buffers: start from a byte pattern, so
        # an element no kernel writes shows up in the results.
        dt = np.dtype(_DTYPES[elem])
        count = int(np.prod(shape))
        env[op.results[0]] = (np.ones(count, dt) if dt == np.bool_ else
                              np.frombuffer(bytearray(b"\xa5" * (count * dt.itemsize)), dt).copy())
        shapes[op.results[0]] = shape
    elif op.name == "rt.view":
        env[op.results[0]] = env[op.operands[0]]
        shapes[op.results[0]] = _memref(_result_type(op))[0]
    elif op.name == "rt.constant":
        shape, elem = _memref(_result_type(op))
        env[op.results[0]] = _dense(_attr(op.props, "value"), shape, _DTYPES[elem]).reshape(-1)
        shapes[op.results[0]] = shape
    elif op.name == "rt.weight":
        shape, elem = _memref(_result_type(op))
        name = re.search(r'name = "([^"]*)"', op.props).group(1)
        value = np.asarray(weights[name])
        # With a permutation the buffer holds the stored (sliced) tensor
        # transposed: buffer dimension i is stored dimension perm[i].
        perm = (_rank_lists(_attr(op.props, "permutation"))[0]
                if "permutation" in op.props else list(range(len(shape))))
        stored = [0] * len(shape)
        for i, d in enumerate(perm):
            stored[d] = shape[i]
        if "global_shape" in op.props:
            value = value.reshape(_rank_lists(_attr(op.props, "global_shape"))[0])
            start = _rank_lists(_attr(op.props, "starts"))[rank]
            value = value[tuple(slice(s0, s0 + n) for s0, n in zip(start, stored))]
            if "zero_padded" in op.props:  # the slice's part past the tensor
                value = np.pad(value, [(0, n - k) for n, k in zip(stored, value.shape)])
        value = np.transpose(value.reshape(stored), perm)
        scale = re.search(r"\bscale = ([-+0-9.eEinf]+) : f64", op.props)
        if scale:  # a folded product, applied at load in float64
            value = value.astype(np.float64) * float(scale.group(1))
        env[op.results[0]] = np.ascontiguousarray(value, _DTYPES[elem]).reshape(-1)
        shapes[op.results[0]] = shape
    elif op.name == "rt.kernel":
        kernel = re.search(r'kernel = "(\w+)"', op.props).group(1)
        seg = [int(x) for x in re.search(r"operandSegmentSizes = array<i32: (\d+), (\d+)>",
                                         op.props).groups()]
        ins = [env[o].reshape(shapes[o]) for o in op.operands[:seg[0]]]
        outs = op.operands[seg[0]:]
        results = _host_kernel(kernel, ins, [shapes[o] for o in outs], _params(op.props), rank)
        for o, r in zip(outs, results):
            env[o][:] = np.asarray(r).reshape(-1).astype(env[o].dtype)
    elif op.name == "rt.launch":
        kernel = _attr(op.props, "kernel")
        grid = int(re.search(r"array<i64: (\d+)", _attr(op.props, "grid")).group(1))
        block = int(re.search(r"array<i64: (\d+)", _attr(op.props, "block")).group(1))
        buffers = [env[o] for o in op.operands]
        checks = re.search(r"\bchecks\b", op.props) is not None
        if checks:  # the status word the runtime passes, zeroed
            buffers.append(np.zeros(2, np.int64))
        kernels[kernel].run(buffers, grid, block)
        # The status code is in the low 8 bits; above them, the ordinal of
        # the checking operation that reported (its node: that entry of
        # checking_nodes, as the CUDA runtime names it).
        code = int(buffers[-1][0]) & 0xFF if checks else 0
        if code:
            names = re.search(r"checking_nodes = \[([^\]]*)\]", op.props)
            ordinal = int(buffers[-1][0]) >> 8
            node = ""
            if names:
                listed = re.findall(r'"((?:[^"\\]|\\.)*)"', names.group(1))
                node = f" (ONNX node '{listed[ordinal]}')" if ordinal < len(listed) else ""
            where = f"generated kernel {kernel}{node}"
        if code == 1:
            raise IndexOutOfRange(f"{where}: index {buffers[-1][1]} read "
                                  "from the data is out of range")
        if code == 2:
            raise DivisionByZero(f"{where}: integer division by zero "
                                 f"(element {buffers[-1][1]} of the result)")
        if code:
            raise RuntimeError(f"{where}: status code {buffers[-1][0]}")
    else:
        raise NotImplementedError(f"emulator: host op {op.name}")
