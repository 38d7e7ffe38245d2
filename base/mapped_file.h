// Read-only memory map of a whole file. Shared so tensors viewing it keep it
// mapped for as long as they live.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace onebit {

class MappedFile {
 public:
  // Throws onebit::Error naming the path on any failure. An empty file maps
  // to size() == 0 and data() == nullptr.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace onebit
