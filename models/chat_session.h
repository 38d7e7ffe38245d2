// A multi-turn chat over one model (`1bit chat`, `ort-run --interactive`):
// the conversation in the model's chat template, its KV cache kept across
// turns so each turn prefills only what it adds — the end of the last
// answer, the user's message, the generation prompt. A model without a
// cache re-runs the whole conversation each turn.
//
// The token sequence is the one the model saw: each answer's tokens as
// generated (not re-tokenized from its text), then the template's end of
// turn. An answer that ended with an end-of-sequence id gives that id back
// (Generator::drop_last) for the template's own <|im_end|>, so the
// conversation is token for token what a fresh run on it would read.
//
// chat_loop() is the read-answer loop with its commands, apart from any
// terminal: cli/ gives it a line reader (line editing on a terminal, plain
// lines from a pipe) and where to print; the tests give it a string.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "models/chat.h"
#include "models/generate.h"

namespace onebit {

class Model;
class Tokenizer;

struct ChatOptions {
  std::string system;        // "" : the template's default system message, if any
  GenerateOptions generate;  // per answer; tokenizer, EOS ids and context come from the model
};

class ChatSession {
 public:
  // Errors name the model: no tokenizer, no chat template, not ChatML.
  ChatSession(Model& model, ChatOptions options);

  // One turn: appends the user's message and generates the answer, its text
  // streamed through options().generate.on_text. Throws, changing nothing,
  // when the turn does not fit the context.
  GenerateResult say(const std::string& user);
  void reset();                              // forget the conversation
  void set_system(const std::string& system);  // and start over with this system message

  // The conversation as text (answers as shown) and as the model's tokens.
  const std::vector<ChatMessage>& messages() const { return messages_; }
  const std::vector<int32_t>& tokens() const;
  bool keeps_cache() const;
  const std::string& system() const { return options_.system; }
  GenerateOptions& generate_options() { return options_.generate; }
  const ChatTemplate& chat_template() const { return template_; }

 private:
  Model& model_;
  ChatOptions options_;
  ChatTemplate template_;
  std::vector<ChatMessage> messages_;
  bool answer_ended_at_eos_ = false;
};

// Where the loop reads a line from.
class LineReader {
 public:
  enum class Status { Line, End, Interrupted };  // End: Ctrl-D or the end of the input
  virtual ~LineReader() = default;
  virtual Status read(const std::string& prompt, std::string& line) = 0;
};

struct ChatLoopIo {
  std::function<void(std::string_view)> answer;  // the answers' text, streamed
  std::function<void(std::string_view)> notice;  // command replies and hints
  // After each answer (for --json records and statistics).
  std::function<void(const std::string& user, const GenerateResult&)> on_answer;
  std::string prompt = "> ";
  // The flag Ctrl-C sets; cleared before each answer.
  std::atomic<bool>* interrupt = nullptr;
};

// Reads lines until /exit, the end of the input, or Ctrl-C twice at the
// prompt. A line is a user message, or a command: /reset, /system TEXT,
// /help, /exit. An answer interrupted by Ctrl-C stays in the conversation
// as far as it went. Errors of one turn (a full context) are reported and
// the loop goes on.
void chat_loop(ChatSession& chat, LineReader& in, const ChatLoopIo& io);

}  // namespace onebit
