// The terminal side of `1bit chat`: Ctrl-C as a flag, and where lines come
// from — line editing with history when stdin is a terminal and 1bit was
// built with libedit or GNU readline, plain lines otherwise (a pipe, a file).
#pragma once

#include <atomic>
#include <memory>

#include "models/chat_session.h"

namespace onebit::cli {

// Set by SIGINT once install_interrupt_handler() ran; the generator checks
// it between tokens and the line reader at the prompt.
std::atomic<bool>& interrupt_flag();
// SIGINT sets the flag instead of ending the process; blocking reads are
// not restarted, so a prompt sees it at once.
void install_interrupt_handler();

// Line editing when stdin is a terminal and the build has it; plain lines
// from stdin otherwise.
std::unique_ptr<LineReader> make_line_reader();
// "libedit", "GNU readline" or "none": what the build has.
const char* line_editing_library();

}  // namespace onebit::cli
