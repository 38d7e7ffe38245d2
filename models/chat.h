// --chat: the prompt wrapped in the model's chat format. 1bit has no Jinja
// engine; it recognises the ChatML family (Qwen, SmolLM) from the template in
// tokenizer_config.json, including a default system message the template
// writes when none is given, and refuses other templates by name.
#pragma once

#include <string>

namespace onebit {

// `system` empty: the template's default system message, if it has one.
std::string apply_chat_template(const std::string& chat_template, const std::string& user, const std::string& system,
                                const std::string& where);

}  // namespace onebit
