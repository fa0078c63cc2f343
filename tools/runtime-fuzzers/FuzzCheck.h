//===- FuzzCheck.h - what the runtime's fuzz targets count as a finding -*- C++ -*-===//
//
// A reader either accepts its input or throws RuntimeError with a message;
// both are expected outcomes. A finding is a crash, a sanitizer report, a
// hang, runaway memory, any other exception escaping (libFuzzer reports it
// as a crash), or an accepted input that breaks a promise the reader makes
// to its users: FUZZ_CHECK aborts with the promise that was broken.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TOOLS_RUNTIMEFUZZERS_FUZZCHECK_H
#define SHARDFLOW_TOOLS_RUNTIMEFUZZERS_FUZZCHECK_H

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, what)                                                 \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: accepted input breaks: %s\n", __FILE__,     \
                   __LINE__, what);                                            \
      std::abort();                                                            \
    }                                                                          \
  } while (false)

#endif // SHARDFLOW_TOOLS_RUNTIMEFUZZERS_FUZZCHECK_H
