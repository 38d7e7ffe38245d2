#include "graph/onnx/onnx_wire.h"

#include "base/error.h"

namespace onebit {

namespace {

// Field numbers on the path ModelProto.graph.initializer.raw_data (onnx.proto).
constexpr uint64_t kModelGraph = 7, kGraphInitializer = 5, kTensorRawData = 9;
constexpr int kLengthDelimited = 2;

class Reader {
 public:
  Reader(const uint8_t* begin, const uint8_t* end, const std::string& name) : p_(begin), end_(end), name_(name) {}
  bool done() const { return p_ >= end_; }
  const uint8_t* pos() const { return p_; }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (p_ >= end_ || shift > 63) malformed("a varint runs past its message");
      const uint8_t b = *p_++;
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  const uint8_t* take(uint64_t n) {
    if (n > static_cast<uint64_t>(end_ - p_)) malformed("a field runs past its message");
    const uint8_t* at = p_;
    p_ += n;
    return at;
  }
  // Skips the payload of a field of wire type `wt` (its tag already read).
  void skip(int wt) {
    switch (wt) {
      case 0: varint(); return;
      case 1: take(8); return;
      case 2: take(varint()); return;
      case 5: take(4); return;
      default: malformed("wire type " + std::to_string(wt) + " is not used by onnx.proto");
    }
  }
  [[noreturn]] void malformed(const std::string& why) const {
    fail("{}: not a valid ONNX model (protobuf wire format: {})", name_, why);
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  const std::string& name_;
};

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Copies the message [begin, end) to `out`; a length-delimited field for
// which `inner(field, payload_begin, payload_end, out)` returns true was
// written by it (tag included), others are copied verbatim.
template <class Inner>
void rewrite(const uint8_t* begin, const uint8_t* end, const std::string& name, std::string& out, Inner inner) {
  Reader r(begin, end, name);
  while (!r.done()) {
    const uint8_t* field_start = r.pos();
    const uint64_t tag = r.varint();
    const uint64_t field = tag >> 3;
    const int wt = static_cast<int>(tag & 7);
    if (wt == kLengthDelimited) {
      const uint64_t len = r.varint();
      const uint8_t* payload = r.take(len);
      if (inner(field, tag, payload, payload + len, out)) continue;
    } else {
      r.skip(wt);
    }
    out.append(reinterpret_cast<const char*>(field_start), static_cast<size_t>(r.pos() - field_start));
  }
}

void put_message(std::string& out, uint64_t tag, const std::string& body) {
  put_varint(out, tag);
  put_varint(out, body.size());
  out += body;
}

}  // namespace

StrippedModel strip_initializer_data(const uint8_t* data, uint64_t size, const std::string& name) {
  StrippedModel m;
  m.bytes.reserve(1 << 20);
  const uint8_t* base = data;
  rewrite(data, data + size, name, m.bytes,
          [&](uint64_t field, uint64_t tag, const uint8_t* gb, const uint8_t* ge, std::string& out) {
            if (field != kModelGraph) return false;
            std::string graph;
            rewrite(gb, ge, name, graph,
                    [&](uint64_t gfield, uint64_t gtag, const uint8_t* tb, const uint8_t* te, std::string& gout) {
                      if (gfield != kGraphInitializer) return false;
                      RawDataRef ref;
                      std::string tensor;
                      rewrite(tb, te, name, tensor,
                              [&](uint64_t tfield, uint64_t ttag, const uint8_t* rb, const uint8_t* re,
                                  std::string& tout) {
                                const uint64_t len = static_cast<uint64_t>(re - rb);
                                if (tfield != kTensorRawData || len < kMinStrippedBytes) return false;
                                ref = {static_cast<uint64_t>(rb - base), len, true};
                                put_varint(tout, ttag);
                                put_varint(tout, 0);
                                return true;
                              });
                      m.initializers.push_back(ref);
                      put_message(gout, gtag, tensor);
                      return true;
                    });
            put_message(out, tag, graph);
            return true;
          });
  return m;
}

}  // namespace onebit
