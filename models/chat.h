// The model's chat format. 1bit has no Jinja engine; it recognises the
// ChatML family (Qwen, SmolLM) from the template in tokenizer_config.json
// (or chat_template.jinja), including a default system message the template
// writes when none is given, and refuses other templates by name. Each
// message renders as
//
//   <|im_start|>{role}\n{content}<|im_end|>\n
//
// and the generation prompt as <|im_start|>assistant\n; the model ends its
// answer with <|im_end|>.
#pragma once

#include <string>
#include <vector>

namespace onebit {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  // An Error naming `where` when there is no template or it is not ChatML.
  static ChatTemplate parse(const std::string& chat_template, const std::string& where);

  // The conversation as the template renders it; a default system message
  // first when messages[0] is not a system one and the template has one.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  // What a turn appends to a conversation that `render(..., true)` began and
  // an answer continued: the end of that answer, the user message, the
  // generation prompt. render() of the whole conversation is the first
  // render followed by each answer and turn, so a chat that keeps its cache
  // prefills only this.
  std::string next_turn(const std::string& user) const;
  const std::string& default_system() const { return default_system_; }
  static constexpr const char* kEndOfTurn = "<|im_end|>";

 private:
  std::string default_system_;
};

// `system` empty: the template's default system message, if it has one.
std::string apply_chat_template(const std::string& chat_template, const std::string& user, const std::string& system,
                                const std::string& where);

}  // namespace onebit
