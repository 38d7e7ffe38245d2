#include "models/chat.h"

#include "base/error.h"

namespace onebit {

namespace {

// SmolLM2's template: "{{ '<|im_start|>system\nYou are ...<|im_end|>\n' }}"
// when messages[0] is not a system message. The literal is taken from the
// template, so it is the model's own default and not ours.
std::string template_default_system(const std::string& tmpl) {
  // The newline after the role is a real one in the template text, or the
  // two characters \n when the template writes it as a Jinja escape.
  std::string key = "<|im_start|>system\n";
  size_t at = tmpl.find(key);
  if (at == std::string::npos) {
    key = "<|im_start|>system\\n";
    at = tmpl.find(key);
  }
  if (at == std::string::npos) return {};
  const size_t start = at + key.size();
  const size_t end = tmpl.find("<|im_end|>", start);
  if (end == std::string::npos) return {};
  std::string text = tmpl.substr(start, end - start);
  // Jinja expressions inside mean the system text is computed (Qwen's tools
  // branch); only a plain literal is a default.
  if (text.find("{{") != std::string::npos || text.find("{%") != std::string::npos ||
      text.find('\'') != std::string::npos)
    return {};
  return text;
}

std::string message(const std::string& role, const std::string& content) {
  return "<|im_start|>" + role + "\n" + content + ChatTemplate::kEndOfTurn + "\n";
}

}  // namespace

ChatTemplate ChatTemplate::parse(const std::string& chat_template, const std::string& where) {
  if (chat_template.empty()) fail("{}: chat needs a chat_template in tokenizer_config.json, and there is none", where);
  if (chat_template.find("<|im_start|>") == std::string::npos)
    fail("{}: chat supports ChatML templates (<|im_start|>role ... <|im_end|>); this model's template is another "
         "format",
         where);
  ChatTemplate t;
  t.default_system_ = template_default_system(chat_template);
  return t;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out;
  if ((messages.empty() || messages[0].role != "system") && !default_system_.empty())
    out += message("system", default_system_);
  for (const ChatMessage& m : messages) out += message(m.role, m.content);
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string ChatTemplate::next_turn(const std::string& user) const {
  return std::string(kEndOfTurn) + "\n" + message("user", user) + "<|im_start|>assistant\n";
}

std::string apply_chat_template(const std::string& chat_template, const std::string& user, const std::string& system,
                                const std::string& where) {
  const ChatTemplate t = ChatTemplate::parse(chat_template, where);
  std::vector<ChatMessage> messages;
  if (!system.empty()) messages.push_back({"system", system});
  messages.push_back({"user", user});
  return t.render(messages, true);
}

}  // namespace onebit
