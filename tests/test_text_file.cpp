// base/text_file.h: a whole file read, bounded, every failure naming what
// and where (the reader of `ort-run --prompt-file`).
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "base/error.h"
#include "base/text_file.h"
#include "model_builder.h"

using namespace onebit;
using onebit::test::scratch_dir;

namespace {

std::string write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string message(const std::string& path, size_t max_bytes) {
  try {
    read_text_file(path, max_bytes, "--what");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("text file: bytes as they are, up to the bound and no further", "[text_file]") {
  const std::string dir = scratch_dir("text_file");
  std::string bytes;
  for (int i = 0; i < 200000; ++i) bytes.push_back(static_cast<char>(i * 7 % 256));  // NULs, invalid UTF-8, newlines
  const size_t chunk = 1 << 16;
  // Lengths around the reader's chunk: the bound must hold at each edge.
  for (const size_t n : {size_t{0}, size_t{1}, chunk - 1, chunk, chunk + 1, 3 * chunk, bytes.size()}) {
    CAPTURE(n);
    const std::string path = write(dir + "/f.txt", bytes.substr(0, n));
    CHECK(read_text_file(path, n, "--what") == bytes.substr(0, n));
    CHECK(read_text_file(path, n + 5, "--what") == bytes.substr(0, n));
    if (n > 0) {
      const std::string m = message(path, n - 1);
      CHECK(m.find("--what '" + path + "'") != std::string::npos);
      CHECK(m.find(fmt::format("more than {} bytes", n - 1)) != std::string::npos);
    }
  }
}

TEST_CASE("text file: a missing file and a directory are errors naming them", "[text_file]") {
  const std::string dir = scratch_dir("text_file_errors");
  const std::string missing = message(dir + "/none.txt", 100);
  CHECK(missing.find("--what '" + dir + "/none.txt'") != std::string::npos);
  CHECK(missing.find("cannot open") != std::string::npos);
  const std::string directory = message(dir, 100);
  CHECK(directory.find("--what '" + dir + "'") != std::string::npos);
  CHECK(directory.find("cannot read") != std::string::npos);
  CHECK(text_file_name("-") == "- (standard input)");
}
