#include "cli/terminal.h"

#include <sys/select.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#if defined(ONEBIT_EDITLINE)
#include <editline/readline.h>
#elif defined(ONEBIT_READLINE)
#include <readline/history.h>
#include <readline/readline.h>
#endif

namespace onebit::cli {

namespace {

static_assert(std::atomic<bool>::is_always_lock_free, "the SIGINT handler stores to it");
std::atomic<bool> g_interrupt{false};

extern "C" void on_sigint(int) { g_interrupt.store(true); }

// Plain lines: a pipe, a file, or a terminal without line editing. A
// SIGINT while it waits ends the read (EINTR) and is reported as such.
class StreamLineReader : public LineReader {
 public:
  Status read(const std::string& prompt, std::string& line) override {
    if (::isatty(0) && !prompt.empty()) {
      std::fputs(prompt.c_str(), stdout);
      std::fflush(stdout);
    }
    if (std::getline(std::cin, line)) return Status::Line;
    if (g_interrupt.exchange(false) && ::isatty(0)) {
      std::cin.clear();
      std::fputs("\n", stdout);
      return Status::Interrupted;
    }
    return Status::End;
  }
};

#if defined(ONEBIT_EDITLINE) || defined(ONEBIT_READLINE)
// readline's callback interface under our own select(): a SIGINT makes
// select() return, so Ctrl-C at the prompt is seen at once, and readline
// never installs signal handlers of its own.
class EditLineReader : public LineReader {
 public:
  EditLineReader() { rl_catch_signals = 0; }

  Status read(const std::string& prompt, std::string& line) override {
    state_ = Waiting;
    rl_callback_handler_install(prompt.c_str(), &EditLineReader::on_line);
    while (state_ == Waiting) {
      fd_set fds;
      FD_ZERO(&fds);
      FD_SET(0, &fds);
      const int r = ::select(1, &fds, nullptr, nullptr, nullptr);
      if (r < 0 && errno == EINTR) {
        if (!g_interrupt.exchange(false)) continue;
        rl_free_line_state();
        rl_callback_handler_remove();
        std::fputs("^C\n", stdout);
        std::fflush(stdout);
        return Status::Interrupted;
      }
      if (r > 0) rl_callback_read_char();
    }
    if (state_ == Eof) {
      std::fputs("\n", stdout);
      return Status::End;
    }
    line = line_;
    if (!line.empty()) add_history(line.c_str());
    return Status::Line;
  }

 private:
  enum State { Waiting, Got, Eof };
  static void on_line(char* text) {
    rl_callback_handler_remove();
    if (!text) {
      state_ = Eof;
      return;
    }
    line_ = text;
    std::free(text);
    state_ = Got;
  }
  static inline State state_ = Waiting;
  static inline std::string line_;
};
#endif

}  // namespace

std::atomic<bool>& interrupt_flag() { return g_interrupt; }

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read returns EINTR
  sigaction(SIGINT, &sa, nullptr);
}

std::unique_ptr<LineReader> make_line_reader() {
#if defined(ONEBIT_EDITLINE) || defined(ONEBIT_READLINE)
  if (::isatty(0) && ::isatty(1)) return std::make_unique<EditLineReader>();
#endif
  return std::make_unique<StreamLineReader>();
}

const char* line_editing_library() {
#if defined(ONEBIT_EDITLINE)
  return "libedit";
#elif defined(ONEBIT_READLINE)
  return "GNU readline";
#else
  return "none";
#endif
}

}  // namespace onebit::cli
