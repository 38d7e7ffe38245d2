// `1bit chat MODEL` and `1bit ort-run MODEL --interactive`: one chat loop
// (models/chat_session.h) on stdin.
#pragma once

#include <string>

#include "cli/generation_flags.h"
#include "cli/session_flags.h"

namespace onebit::cli {

struct ChatCommand {
  std::string model, tokenizer, system;
  bool cached = false, quiet = false, verbose = false;
  GenerationFlags gen;
  SessionFlags session;
};

int run_chat(const ChatCommand& c);

}  // namespace onebit::cli
