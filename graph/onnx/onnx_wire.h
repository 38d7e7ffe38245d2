// A pre-pass over the protobuf wire format of an .onnx file, so weights
// embedded in it are viewed in the mapped file instead of being copied by
// protobuf (which would double the memory of the load and touch every page).
//
// It rewrites ModelProto.graph(7).initializer(5).raw_data(9) payloads of at
// least kMinBytes to empty ones and records where each payload sits in the
// file; protobuf then parses the small rewritten stream. Only the three
// levels on that path are decoded; every other field is copied verbatim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace onebit {

struct RawDataRef {
  uint64_t offset = 0;  // in the file
  uint64_t size = 0;
  bool present = false;  // false: this initializer's raw_data stayed inline
};

struct StrippedModel {
  std::string bytes;                   // the rewritten ModelProto
  std::vector<RawDataRef> initializers;  // per graph initializer, in order
};

inline constexpr uint64_t kMinStrippedBytes = 4096;

// Throws onebit::Error naming `name` when the wire format is malformed (the
// same file would fail protobuf's own parse).
StrippedModel strip_initializer_data(const uint8_t* data, uint64_t size, const std::string& name);

}  // namespace onebit
