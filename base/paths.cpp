#include "base/paths.h"

#include <limits.h>
#include <stdlib.h>

#include <filesystem>

#include "base/error.h"

namespace onebit {

namespace fs = std::filesystem;

namespace {

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  if (!::realpath(p.c_str(), buf)) return {};
  return buf;
}

}  // namespace

std::string resolve_inside(const std::string& dir, const std::string& relative, const std::string& what) {
  if (relative.empty()) fail("{} is empty", what);
  const fs::path rel(relative);
  if (rel.is_absolute()) fail("{} '{}' is absolute; it must be relative to '{}'", what, relative, dir);
  for (const auto& part : rel)
    if (part == "..") fail("{} '{}' leaves '{}' ('..')", what, relative, dir);
  const std::string dir_real = real_path(dir.empty() ? "." : dir);
  if (dir_real.empty()) fail("cannot resolve the directory '{}'", dir);
  const std::string joined = (fs::path(dir.empty() ? "." : dir) / rel).string();
  const std::string real = real_path(joined);
  if (real.empty()) fail("{} '{}' does not exist ({})", what, relative, joined);
  const bool inside = real.compare(0, dir_real.size(), dir_real) == 0 &&
                      (real.size() == dir_real.size() || real[dir_real.size()] == '/' || dir_real == "/");
  if (!inside || real == dir_real) fail("{} '{}' resolves to '{}', outside '{}'", what, relative, real, dir_real);
  return real;
}

}  // namespace onebit
