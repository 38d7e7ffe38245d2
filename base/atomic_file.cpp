#include "base/atomic_file.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "base/error.h"

namespace onebit {

namespace fs = std::filesystem;

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const fs::path p(path_);
  temp_ = (p.parent_path() / ("." + p.filename().string() + ".tmp-" + std::to_string(getpid()))).string();
  out_.open(temp_, std::ios::binary | std::ios::trunc);
  if (!out_) fail("{}: cannot write (temporary file {})", path_, temp_);
}

AtomicFile::~AtomicFile() {
  if (done_) return;
  out_.close();
  std::remove(temp_.c_str());
}

void AtomicFile::commit() {
  out_.close();
  if (!out_) {
    std::remove(temp_.c_str());
    done_ = true;
    fail("{}: write failed (disk full?)", path_);
  }
  std::error_code ec;
  fs::rename(temp_, path_, ec);
  done_ = true;
  if (ec) {
    std::remove(temp_.c_str());
    fail("{}: cannot replace it with {}: {}", path_, temp_, ec.message());
  }
}

void refuse_same_file(const std::string& out, const std::string& in, const char* what) {
  std::error_code ec;
  if (fs::exists(out, ec) && fs::equivalent(out, in, ec))
    fail("{}: the {} would overwrite the model being read ({})", out, what, in);
}

}  // namespace onebit
