//===- Trace.cpp - every rank's work on one timeline -----------------------===//

#include "shardflow/Runtime/Core/Trace.h"
#include "shardflow/Runtime/Core/Device.h"
#include "shardflow/Runtime/Format/Json.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

using namespace shardflow::runtime;

namespace {

/// Ping-pongs per rank; the fastest round trip gives the offset.
constexpr int kClockRounds = 8;

Tensor scalar(double &v) { return Tensor{&v, DType::F64, {1}}; }

/// A field of a line of the ranks' exchange: no tabs or newlines.
std::string field(const std::string &s) {
  std::string out;
  for (char c : s)
    out += c == '\t' ? ' ' : c == '\n' ? ' ' : c;
  return out;
}

std::string serialize(const std::vector<TraceEvent> &events) {
  std::string text;
  char numbers[160];
  for (const TraceEvent &e : events) {
    std::snprintf(numbers, sizeof(numbers), "%.9f\t%.9f\t%d\t%lld\t%lld\t%d\t", e.start, e.seconds,
                  e.lane, (long long)e.instruction, (long long)e.bytes, e.run);
    text += numbers + field(e.category) + "\t" + field(e.name) + "\t" + field(e.node) + "\n";
  }
  return text;
}

std::vector<TraceEvent> deserialize(const std::string &text) {
  std::vector<TraceEvent> events;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    size_t begin = 0;
    for (size_t tab; (tab = line.find('\t', begin)) != std::string::npos; begin = tab + 1)
      f.push_back(line.substr(begin, tab - begin));
    f.push_back(line.substr(begin));
    if (f.size() != 9)
      continue;
    TraceEvent e;
    e.start = std::stod(f[0]);
    e.seconds = std::stod(f[1]);
    e.lane = std::stoi(f[2]);
    e.instruction = std::stoll(f[3]);
    e.bytes = std::stoll(f[4]);
    e.run = std::stoi(f[5]);
    e.category = f[6];
    e.name = f[7];
    e.node = f[8];
    events.push_back(std::move(e));
  }
  return events;
}

std::string number(double v) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.3f", v);
  return text;
}

} // namespace

TraceRecorder::TraceRecorder(Communicator &world, std::vector<std::string> lanes)
    : world(world), lanes(std::move(lanes)) {
  measureOffsets();
}

void TraceRecorder::measureOffsets() {
  int n = world.size(), rank = world.rank();
  offsets.assign(size_t(n), 0.0);
  roundTrips.assign(size_t(n), 0.0);
  for (int r = 1; r < n; ++r) {
    if (rank != 0 && rank != r)
      continue;
    double best = std::numeric_limits<double>::infinity();
    for (int round = 0; round < kClockRounds; ++round) {
      if (rank == 0) {
        // t1: sent; t2: rank r's clock when it answered; t3: answer back.
        double t1 = hostClockSeconds(), t2 = 0;
        Tensor ping = scalar(t1), pong = scalar(t2);
        world.sendRecv(&ping, r, &pong, r);
        double t3 = hostClockSeconds();
        if (t3 - t1 < best) {
          best = t3 - t1;
          offsets[size_t(r)] = t2 - (t1 + t3) / 2;
          roundTrips[size_t(r)] = best;
        }
      } else {
        double ping = 0;
        Tensor in = scalar(ping);
        world.sendRecv(nullptr, -1, &in, 0);
        double t2 = hostClockSeconds();
        Tensor out = scalar(t2);
        world.sendRecv(&out, 0, nullptr, -1);
      }
    }
  }
}

void TraceRecorder::write(const std::string &path) {
  int n = world.size(), rank = world.rank();
  std::string mine = serialize(events);
  int64_t size = int64_t(mine.size());
  std::vector<int64_t> sizes(size_t(n), 0);
  world.allGather(Tensor{&size, DType::I64, {1}}, Tensor{sizes.data(), DType::I64, {n}});
  if (rank != 0) {
    Tensor t{mine.data(), DType::U8, {size}};
    world.sendRecv(&t, 0, nullptr, -1);
    return;
  }
  std::vector<std::vector<TraceEvent>> ranks(static_cast<size_t>(n));
  ranks[0] = events;
  for (int r = 1; r < n; ++r) {
    std::string text(size_t(sizes[size_t(r)]), '\0');
    Tensor t{text.data(), DType::U8, {sizes[size_t(r)]}};
    world.sendRecv(nullptr, -1, &t, r);
    ranks[size_t(r)] = deserialize(text);
  }
  // On rank 0's clock, from the earliest span on.
  double origin = std::numeric_limits<double>::infinity();
  for (int r = 0; r < n; ++r)
    for (const TraceEvent &e : ranks[size_t(r)])
      origin = std::min(origin, e.start - offsets[size_t(r)]);
  if (origin == std::numeric_limits<double>::infinity())
    origin = 0;

  std::ofstream f(path);
  if (!f)
    throw RuntimeError("cannot write the trace to '" + path + "'");
  f << "{\"traceEvents\": [\n";
  bool first = true;
  auto emit = [&](const std::string &object) {
    f << (first ? "" : ",\n") << object;
    first = false;
  };
  for (int r = 0; r < n; ++r) {
    std::string pid = std::to_string(r);
    emit("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + pid +
         ", \"args\": {\"name\": \"rank " + pid + "\"}}");
    emit("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " + pid +
         ", \"args\": {\"sort_index\": " + pid + "}}");
    for (size_t lane = 0; lane < lanes.size(); ++lane)
      emit("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid + ", \"tid\": " +
           std::to_string(lane) + ", \"args\": {\"name\": " + jsonString(lanes[lane]) + "}}");
    for (const TraceEvent &e : ranks[size_t(r)]) {
      std::string args;
      if (e.instruction >= 0)
        args += "\"instruction\": " + std::to_string(e.instruction);
      if (e.run >= 0)
        args += std::string(args.empty() ? "" : ", ") + "\"run\": " + std::to_string(e.run);
      if (!e.node.empty())
        args += std::string(args.empty() ? "" : ", ") + "\"node\": " + jsonString(e.node);
      if (e.bytes >= 0)
        args += std::string(args.empty() ? "" : ", ") + "\"bytes\": " + std::to_string(e.bytes);
      emit("{\"name\": " + jsonString(e.name) + ", \"cat\": " + jsonString(e.category) +
           ", \"ph\": \"X\", \"pid\": " + pid + ", \"tid\": " + std::to_string(e.lane) +
           ", \"ts\": " + number((e.start - offsets[size_t(r)] - origin) * 1e6) +
           ", \"dur\": " + number(std::max(e.seconds, 0.0) * 1e6) + ", \"args\": {" + args + "}}");
    }
  }
  f << "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"producer\": \"shard-run\", "
       "\"ranks\": "
    << n << ", \"clockOffsetsMicroseconds\": [";
  for (int r = 0; r < n; ++r)
    f << (r ? ", " : "") << number(offsets[size_t(r)] * 1e6);
  f << "], \"clockRoundTripsMicroseconds\": [";
  for (int r = 0; r < n; ++r)
    f << (r ? ", " : "") << number(roundTrips[size_t(r)] * 1e6);
  f << "]}}\n";
  if (!f)
    throw RuntimeError("cannot write the trace to '" + path + "'");
}
