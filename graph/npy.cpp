#include "graph/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/mapped_file.h"

namespace onebit {

namespace {

struct NpyType {
  const char* descr;
  DType dtype;
};
constexpr NpyType kTypes[] = {
    {"<f4", DType::F32}, {"<f8", DType::F64}, {"<f2", DType::F16}, {"|i1", DType::I8},  {"|u1", DType::U8},
    {"<i2", DType::I16}, {"<u2", DType::U16}, {"<i4", DType::I32}, {"<u4", DType::U32}, {"<i8", DType::I64},
    {"<u8", DType::U64}, {"|b1", DType::Bool},
};

std::string header_field(const std::string& header, const std::string& key, const std::string& path) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) fail("{}: .npy header has no '{}'", path, key);
  size_t colon = header.find(':', k);
  if (colon == std::string::npos) fail("{}: malformed .npy header", path);
  size_t start = colon + 1;
  while (start < header.size() && header[start] == ' ') ++start;
  if (start >= header.size()) fail("{}: malformed .npy header", path);
  if (header[start] == '\'') {
    const size_t end = header.find('\'', start + 1);
    if (end == std::string::npos) fail("{}: malformed .npy header", path);
    return header.substr(start + 1, end - start - 1);
  }
  if (header[start] == '(') {
    const size_t end = header.find(')', start);
    if (end == std::string::npos) fail("{}: malformed .npy header", path);
    return header.substr(start + 1, end - start - 1);
  }
  const size_t end = header.find_first_of(",}", start);
  return header.substr(start, end - start);
}

}  // namespace

Tensor read_npy(const std::string& path) {
  auto file = MappedFile::open(path);
  const uint8_t* p = file->data();
  const uint64_t size = file->size();
  if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) fail("{}: not a .npy file", path);
  const int major = p[6];
  uint64_t header_len, header_at;
  if (major == 1) {
    header_len = p[8] | (uint64_t(p[9]) << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) fail("{}: truncated .npy header", path);
    header_len = p[8] | (uint64_t(p[9]) << 8) | (uint64_t(p[10]) << 16) | (uint64_t(p[11]) << 24);
    header_at = 12;
  } else {
    fail("{}: unsupported .npy version {}", path, major);
  }
  if (header_at + header_len > size) fail("{}: truncated .npy header", path);
  const std::string header(reinterpret_cast<const char*>(p + header_at), header_len);
  const std::string descr = header_field(header, "descr", path);
  const std::string order = header_field(header, "fortran_order", path);
  if (order.find("True") != std::string::npos) fail("{}: Fortran-order arrays are not supported", path);
  DType dtype = DType::Undefined;
  for (const auto& t : kTypes)
    if (descr == t.descr) dtype = t.dtype;
  if (dtype == DType::Undefined) fail("{}: unsupported .npy dtype '{}'", path, descr);
  Shape shape;
  const std::string dims = header_field(header, "shape", path);
  size_t i = 0;
  while (i < dims.size()) {
    while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) ++i;
    if (i >= dims.size()) break;
    size_t j = i;
    while (j < dims.size() && dims[j] >= '0' && dims[j] <= '9') ++j;
    if (j == i || j - i > 18) fail("{}: bad .npy shape '({})'", path, dims);
    shape.push_back(std::stoll(dims.substr(i, j - i)));
    i = j;
  }
  const int64_t count = checked_numel(shape);
  if (count < 0) fail("{}: .npy shape ({}) has more than 2^50 elements", path, dims);
  const uint64_t data_at = header_at + header_len;
  const uint64_t need = with_context(path, [&] { return dtype_bytes(dtype, count); });
  if (size - data_at != need)
    fail("{}: .npy shape {} of {} needs {} bytes, the file holds {}", path, shape_str(shape), dtype_name(dtype), need,
         size - data_at);
  Tensor t = Tensor::allocate_uninit(dtype, shape);
  if (need) std::memcpy(t.raw(), p + data_at, need);
  if (dtype == DType::Bool)  // one byte each, 0 or 1 to be read as bool
    for (size_t i = 0; i < need; ++i) static_cast<uint8_t*>(t.raw())[i] = static_cast<uint8_t*>(t.raw())[i] != 0;
  return t;
}

void write_npy(const std::string& path, const Tensor& t) {
  const char* descr = nullptr;
  for (const auto& k : kTypes)
    if (k.dtype == t.dtype()) descr = k.descr;
  if (t.dtype() == DType::BF16) fail("{}: bfloat16 has no .npy type", path);
  if (!descr) fail("{}: {} has no .npy type", path, dtype_name(t.dtype()));
  std::string shape;
  for (int64_t d : t.shape()) shape += std::to_string(d) + ", ";
  if (t.rank() > 1) shape.resize(shape.size() - 1);
  if (t.rank() > 1) shape.pop_back();
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, shape);
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  AtomicFile file(path);  // a killed writer leaves no half .npy under `path`
  std::ofstream& out = file.out();
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(len & 0xff));
  out.put(static_cast<char>(len >> 8));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.bytes()));
  file.commit();
}

}  // namespace onebit
