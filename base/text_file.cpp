#include "base/text_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "base/error.h"

namespace onebit {

std::string text_file_name(const std::string& path) {
  return path == "-" ? std::string("- (standard input)") : "'" + path + "'";
}

std::string read_text_file(const std::string& path, size_t max_bytes, const std::string& what) {
  const bool from_stdin = path == "-";
  const std::string name = text_file_name(path);
  std::unique_ptr<FILE, int (*)(FILE*)> owned(nullptr, &std::fclose);
  FILE* f = stdin;
  if (!from_stdin) {
    owned.reset(std::fopen(path.c_str(), "rb"));
    if (!owned) fail("{} {}: cannot open ({})", what, name, std::strerror(errno));
    f = owned.get();
  }
  std::string text;
  char chunk[1 << 16];
  for (;;) {
    const size_t n = std::fread(chunk, 1, sizeof chunk, f);
    // Checked before the append: at most one chunk past the bound is held.
    if (n > max_bytes - std::min(max_bytes, text.size()))
      fail("{} {}: more than {} bytes, the most it may hold", what, name, max_bytes);
    text.append(chunk, n);
    if (n < sizeof chunk) break;
  }
  if (std::ferror(f)) fail("{} {}: cannot read ({})", what, name, std::strerror(errno));
  return text;
}

}  // namespace onebit
