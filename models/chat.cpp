#include "models/chat.h"

#include "base/error.h"

namespace onebit {

namespace {

// SmolLM2's template: "{{ '<|im_start|>system\nYou are ...<|im_end|>\n' }}"
// when messages[0] is not a system message. The literal is taken from the
// template, so it is the model's own default and not ours.
std::string default_system(const std::string& tmpl) {
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

}  // namespace

std::string apply_chat_template(const std::string& chat_template, const std::string& user, const std::string& system,
                                const std::string& where) {
  if (chat_template.empty()) fail("{}: --chat needs a chat_template in tokenizer_config.json, and there is none", where);
  if (chat_template.find("<|im_start|>") == std::string::npos)
    fail("{}: --chat supports ChatML templates (<|im_start|>role ... <|im_end|>); this model's template is another "
         "format",
         where);
  std::string sys = system.empty() ? default_system(chat_template) : system;
  std::string out;
  if (!sys.empty()) out += "<|im_start|>system\n" + sys + "<|im_end|>\n";
  out += "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
  return out;
}

}  // namespace onebit
