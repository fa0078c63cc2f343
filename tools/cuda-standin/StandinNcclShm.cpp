//===- StandinNcclShm.cpp - NCCL ranks in other processes -----------------===//
//
// See StandinNcclShm.h. The control file's counters are read and written
// with atomic builtins (the mapping is shared between processes); data
// files are written with pwrite before the counter that publishes them is
// stored with release order, and read with pread after it is loaded with
// acquire order.
//
//===----------------------------------------------------------------------===//

#include "StandinNcclShm.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace shardflow::standin::nccl {

namespace {

struct Header {
  uint64_t nranks; // set by the first rank to join
  uint64_t left;   // ranks that have left
  uint64_t unused[6];
};

uint64_t load(const uint64_t &v) {
  return __atomic_load_n(&v, __ATOMIC_ACQUIRE);
}
void store(uint64_t &v, uint64_t x) {
  __atomic_store_n(&v, x, __ATOMIC_RELEASE);
}

std::string systemError(const std::string &what) {
  return what + ": " + std::strerror(errno);
}

/// pwrite or pread of all `bytes`; false on an error (errno says which)
/// or a file that ends early.
template <typename Io, typename Pointer>
bool transfer(Io call, int fd, Pointer p, size_t bytes, size_t offset) {
  for (size_t done = 0; done < bytes;) {
    ssize_t n = call(fd, p + done, bytes - done, off_t(offset + done));
    if (n <= 0) {
      if (n == 0)
        errno = EIO;
      return false;
    }
    done += size_t(n);
  }
  return true;
}

/// The folder communicators meet in.
std::string baseFolder() {
  if (const char *dir = std::getenv("SHARDFLOW_STANDIN_NCCL_DIR"); dir && *dir)
    return dir;
  struct stat st;
  if (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) &&
      ::access("/dev/shm", W_OK) == 0)
    return "/dev/shm";
  const char *tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

// NCCL's ncclDataType_t and ncclRedOp_t values (its ABI), kept free of
// nccl.h so that this file builds with the unit tests.
const char *typeName(int type) {
  static const char *names[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",
                                "ncclUint32",  "ncclInt64",   "ncclUint64",
                                "ncclFloat16", "ncclFloat32", "ncclFloat64",
                                "ncclBfloat16"};
  return type >= 0 && type < 10 ? names[type] : "an unknown type";
}

const char *opName(int op) {
  static const char *names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < 5 ? names[op] : "an unknown operation";
}

} // namespace

struct Link::Slot {
  uint64_t claimed;  // the rank has started joining
  uint64_t joined;   // device and host are set
  uint64_t posted;   // the latest collective posted
  uint64_t finished; // the latest collective finished
  uint64_t aborted;
  int64_t device;
  uint64_t unused[2];
  Call call; // what the latest posted collective is
  char host[64];
};

struct Link::Pair {
  uint64_t sent;  // sends from `from` to `to` so far
  uint64_t taken; // of those, received
  uint64_t bytes; // the size of the latest
  uint64_t unused[5];
};

std::string describe(const Call &call) {
  const char *kind = call.kind == AllReduce       ? "all_reduce"
                     : call.kind == AllGather     ? "all_gather"
                     : call.kind == ReduceScatter ? "reduce_scatter"
                     : call.kind == Broadcast     ? "broadcast"
                                                  : "an unknown collective";
  std::string text = std::string(kind) + " of " + std::to_string(call.count) +
                     " " + typeName(call.type);
  if (call.kind == Broadcast)
    text += " (root " + std::to_string(call.op) + ")";
  else if (call.kind != AllGather)
    text += std::string(" (") + opName(call.op) + ")";
  return text;
}

Link::Slot &Link::slot(int r) const {
  return reinterpret_cast<Slot *>(control + sizeof(Header))[r];
}

Link::Pair &Link::pair(int from, int to) const {
  auto *pairs = reinterpret_cast<Pair *>(control + sizeof(Header) +
                                         nranks * sizeof(Slot));
  return pairs[size_t(from) * size_t(nranks) + size_t(to)];
}

std::string Link::path(const std::string &name) const {
  return folder + "/" + name;
}

int Link::fileOf(const std::string &name, bool create) {
  auto it = files.find(name);
  if (it != files.end())
    return it->second;
  int fd = ::open(path(name).c_str(), O_RDWR | (create ? O_CREAT : 0), 0600);
  if (fd < 0)
    throw std::runtime_error(systemError("opening " + path(name)));
  files[name] = fd;
  return fd;
}

Link::Link(const std::string &id, int nranks, int rank, int device)
    : nranks(nranks), me(rank), folder(baseFolder() + "/" + id) {
  try {
    join(device);
  } catch (...) {
    left = true; // not a member: the members clean up
    release();
    throw;
  }
}

void Link::join(int device) {
  int rank = me;
  if (::mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(
        systemError("making " + folder + " (SHARDFLOW_STANDIN_NCCL_DIR)"));
  int fd = fileOf("control", true);
  controlBytes = sizeof(Header) + size_t(nranks) * sizeof(Slot) +
                 size_t(nranks) * size_t(nranks) * sizeof(Pair);
  struct stat st;
  if (::fstat(fd, &st) != 0)
    throw std::runtime_error(systemError("reading " + path("control")));
  // Never shrunk: a rank that names another size finds out below.
  if (size_t(st.st_size) < controlBytes &&
      ::ftruncate(fd, off_t(controlBytes)) != 0)
    throw std::runtime_error(systemError("sizing " + path("control")));
  void *m =
      ::mmap(nullptr, controlBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED)
    throw std::runtime_error(systemError("mapping " + path("control")));
  control = static_cast<char *>(m);
  auto &header = *reinterpret_cast<Header *>(control);
  uint64_t expected = 0;
  if (!__atomic_compare_exchange_n(&header.nranks, &expected, uint64_t(nranks),
                                   false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
      expected != uint64_t(nranks)) {
    throw std::runtime_error(
        "rank " + std::to_string(rank) + " joins a communicator of " +
        std::to_string(nranks) + " ranks, but another rank made it with " +
        std::to_string(expected));
  }
  Slot &mine = slot(rank);
  if (__atomic_exchange_n(&mine.claimed, 1, __ATOMIC_ACQ_REL) != 0)
    throw std::runtime_error(
        "rank " + std::to_string(rank) +
        " joined the communicator twice (two processes with one rank)");
  fileOf("r" + std::to_string(rank), true);
  mine.device = device;
  ::gethostname(mine.host, sizeof(mine.host) - 1);
  store(mine.joined, 1);
}

Link::~Link() { release(); }

void Link::release() {
  for (auto &[name, fd] : files)
    ::close(fd);
  files.clear();
  if (!control)
    return;
  bool last = false;
  if (!left) {
    auto &header = *reinterpret_cast<Header *>(control);
    last = __atomic_add_fetch(&header.left, 1, __ATOMIC_ACQ_REL) ==
           uint64_t(nranks);
  }
  ::munmap(control, controlBytes);
  control = nullptr;
  if (!last)
    return;
  // Everyone has left: nobody reads these any more.
  if (DIR *d = ::opendir(folder.c_str())) {
    while (dirent *e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        ::unlink(path(e->d_name).c_str());
    ::closedir(d);
  }
  ::rmdir(folder.c_str());
}

bool Link::joined() {
  for (int r = 0; r < nranks; ++r)
    if (!load(slot(r).joined))
      return false;
  if (!checked) {
    for (int a = 0; a < nranks; ++a)
      for (int b = a + 1; b < nranks; ++b)
        if (slot(a).device == slot(b).device &&
            std::strncmp(slot(a).host, slot(b).host, sizeof(Slot::host)) == 0)
          throw std::runtime_error(
              "Duplicate GPU detected: rank " + std::to_string(a) +
              " and rank " + std::to_string(b) + " both use device " +
              std::to_string(slot(a).device) + " of host " + slot(a).host +
              " (NCCL takes one GPU per rank; SHARDFLOW_STANDIN_GPUS sets how "
              "many the "
              "stand-in has)");
    checked = true;
  }
  return true;
}

int Link::abortedPeer() const {
  for (int r = 0; r < nranks; ++r)
    if (r != me && load(slot(r).aborted))
      return r;
  return -1;
}

void Link::abort() { store(slot(me).aborted, 1); }

bool Link::post(uint64_t seq, const Call &call, const void *data,
                size_t bytes) {
  for (int r = 0; r < nranks; ++r)
    if (load(slot(r).finished) + 1 < seq)
      return false;
  std::string name = "r" + std::to_string(me);
  if (!transfer(::pwrite, fileOf(name, true), static_cast<const char *>(data),
                bytes, 0))
    throw std::runtime_error(systemError("writing " + path(name)));
  slot(me).call = call;
  store(slot(me).posted, seq);
  return true;
}

bool Link::allPosted(uint64_t seq) {
  for (int r = 0; r < nranks; ++r)
    if (load(slot(r).posted) < seq)
      return false;
  const Call &mine = slot(me).call;
  for (int r = 0; r < nranks; ++r) {
    const Call &theirs = slot(r).call;
    if (std::memcmp(&theirs, &mine, sizeof(Call)) != 0)
      throw std::runtime_error(
          "collective #" + std::to_string(seq) + " of the communicator: rank " +
          std::to_string(me) + " called " + describe(mine) + ", rank " +
          std::to_string(r) + " called " + describe(theirs) +
          " (every rank must make the same calls in the same order)");
  }
  return true;
}

void Link::read(int peer, size_t offset, void *out, size_t bytes) {
  std::string name = "r" + std::to_string(peer);
  if (!transfer(::pread, fileOf(name, false), static_cast<char *>(out), bytes,
                offset))
    throw std::runtime_error(systemError("reading " + path(name)));
}

void Link::finish(uint64_t seq) { store(slot(me).finished, seq); }

std::string Link::missing(uint64_t seq) const {
  std::string list;
  for (int r = 0; r < nranks; ++r)
    if (load(slot(r).posted) < seq)
      list += (list.empty() ? "" : ", ") + std::to_string(r);
  return list;
}

bool Link::send(int peer, uint64_t nth, const void *data, size_t bytes) {
  Pair &p = pair(me, peer);
  if (load(p.taken) + 1 < nth)
    return false;
  std::string name = "p" + std::to_string(me) + "-" + std::to_string(peer);
  if (!transfer(::pwrite, fileOf(name, true), static_cast<const char *>(data),
                bytes, 0))
    throw std::runtime_error(systemError("writing " + path(name)));
  store(p.bytes, bytes);
  store(p.sent, nth);
  return true;
}

bool Link::receive(int peer, uint64_t nth, void *out, size_t bytes) {
  Pair &p = pair(peer, me);
  if (load(p.sent) < nth)
    return false;
  if (load(p.bytes) != bytes)
    throw std::runtime_error(
        "receive #" + std::to_string(nth) + " of rank " + std::to_string(me) +
        " from rank " + std::to_string(peer) + " takes " +
        std::to_string(bytes) + " B, but rank " + std::to_string(peer) +
        " sent " + std::to_string(load(p.bytes)) + " B");
  std::string name = "p" + std::to_string(peer) + "-" + std::to_string(me);
  if (!transfer(::pread, fileOf(name, false), static_cast<char *>(out), bytes,
                0))
    throw std::runtime_error(systemError("reading " + path(name)));
  store(p.taken, nth);
  return true;
}

} // namespace shardflow::standin::nccl
