//===- Json.h - JSON text for the files the runtime writes ------*- C++ -*-===//
//
// The runtime writes JSON (Chrome traces, training logs, safetensors
// headers) without a JSON library: strings escaped here, once.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_FORMAT_JSON_H
#define SHARDFLOW_RUNTIME_FORMAT_JSON_H

#include <cstdio>
#include <string>

namespace shardflow::runtime {

/// `s` as a JSON string literal, quotes included.
inline std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof(escape), "\\u%04x", c);
      out += escape;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_FORMAT_JSON_H
