// Nothing lost (docs/reliability.md): `pack`, `run --output-dir` and
// `--dump-logits` write through base/atomic_file.h, so a file appears under
// its name only whole, and a writer killed mid-write leaves the old file (or
// none) — never half of the new one. Also: no command writes over the model
// it reads.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "base/atomic_file.h"
#include "base/error.h"
#include "model_builder.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;
namespace fs = std::filesystem;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("atomic file: appears whole on commit, never without it", "[atomic]") {
  const std::string dir = scratch_dir("atomic_unit");
  const std::string path = dir + "/out.bin";
  {
    AtomicFile f(path);
    f.out() << "half";
    CHECK_FALSE(fs::exists(path));
  }  // no commit: nothing under the name, no temporary left
  CHECK_FALSE(fs::exists(path));
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 0);
  {
    std::ofstream(path) << "old";
    AtomicFile f(path);
    f.out() << "new contents";
    CHECK(read_all(path) == "old");  // the old file stays until commit
    f.commit();
  }
  CHECK(read_all(path) == "new contents");
  CHECK_THROWS_WITH(AtomicFile(dir + "/no/such/dir/x"), Catch::Contains("cannot write"));
  CHECK_THROWS_WITH(refuse_same_file(path, path, "output"), Catch::Contains("would overwrite the model"));
}

TEST_CASE("atomic file: `1bit run` killed while writing leaves the old output whole", "[atomic]") {
  // 96 MiB of output: long enough to be caught mid-write.
  constexpr int32_t kFloat = 1, kInt64 = 7;
  ModelBuilder b;
  b.output("y", kFloat, {-1});
  b.initializer<int64_t>("shape", kInt64, {1}, {int64_t{24} << 20});
  b.node("ConstantOfShape", {"shape"}, {"y"}, "big");
  const std::string dir = scratch_dir("atomic_kill");
  b.save(dir + "/model.onnx");
  const std::string out = dir + "/out", final_path = out + "/y.npy";
  fs::create_directories(out);
  std::ofstream(final_path) << "the previous output";

  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    execl(ONEBIT_CLI, ONEBIT_CLI, "run", (dir + "/model.onnx").c_str(), "-o", out.c_str(), "--threads", "1",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for the temporary to appear and grow, then kill.
  const std::string temp = out + "/.y.npy.tmp-" + std::to_string(pid);
  bool caught = false;
  for (int i = 0; i < 20000 && !caught; ++i) {
    std::error_code ec;
    if (fs::exists(temp, ec) && fs::file_size(temp, ec) > (1u << 20)) caught = true;
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  INFO("caught mid-write: " << caught);
  REQUIRE(caught);
  CHECK(WIFSIGNALED(status));
  CHECK(read_all(final_path) == "the previous output");  // untouched, not half of the new one
  fs::remove(temp);
}
