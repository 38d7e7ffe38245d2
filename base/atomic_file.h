// A file that only ever appears whole under its name: the bytes go to a
// temporary file beside it (same directory, so the rename is atomic), and
// commit() renames it over the target. A writer killed mid-write leaves the
// temporary (".NAME.tmp-PID"), never a half file under NAME; destroyed
// without commit(), the temporary is removed. Not a guard against power
// loss (there is no fsync): against processes that die.
#pragma once

#include <fstream>
#include <string>

namespace onebit {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::ofstream& out() { return out_; }
  const std::string& temp_path() const { return temp_; }
  // Closes, checks the stream, renames over the target; an Error naming the
  // file when any step fails (the temporary is removed then).
  void commit();

 private:
  std::string path_, temp_;
  std::ofstream out_;
  bool done_ = false;
};

// An Error when `out` and `in` are the same file (a command never writes
// over what it reads).
void refuse_same_file(const std::string& out, const std::string& in, const char* what);

}  // namespace onebit
