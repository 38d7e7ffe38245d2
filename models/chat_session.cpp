#include "models/chat_session.h"

#include <fmt/format.h>

#include "base/error.h"
#include "models/model.h"

namespace onebit {

ChatSession::ChatSession(Model& model, ChatOptions options)
    : model_(model), options_(std::move(options)),
      template_(ChatTemplate::parse(model.files().chat_template, model.files().dir)) {
  if (!model.tokenizer()) fail("{}: chat needs a tokenizer; none was found beside the model", model.path());
  GenerateOptions& g = options_.generate;
  g.tokenizer = model.tokenizer();
  if (g.eos_ids.empty()) g.eos_ids = model.eos_ids();
  if (g.max_context == 0) g.max_context = model.max_positions();
}

const std::vector<int32_t>& ChatSession::tokens() const { return model_.generator().sequence(); }

bool ChatSession::keeps_cache() const { return model_.generator().cached(); }

void ChatSession::reset() {
  model_.generator().reset();
  messages_.clear();
  answer_ended_at_eos_ = false;
}

void ChatSession::set_system(const std::string& system) {
  options_.system = system;
  reset();
}

GenerateResult ChatSession::say(const std::string& user) {
  Generator& gen = model_.generator();
  const Tokenizer& tok = *model_.tokenizer();
  const bool first = messages_.empty();
  std::vector<int32_t> turn;
  if (first) {
    std::vector<ChatMessage> m;
    if (!options_.system.empty()) m.push_back({"system", options_.system});
    m.push_back({"user", user});
    turn = tok.encode(template_.render(m, true));  // as `ort-run --chat` encodes it
  } else {
    turn = tok.encode(template_.next_turn(user), /*split_special=*/true, /*add_special=*/false);
  }
  // The answer's end-of-sequence id, not yet run, gives way to the
  // template's end of turn, which `turn` begins with.
  const bool drop = !first && answer_ended_at_eos_;
  const int64_t so_far = static_cast<int64_t>(gen.sequence().size()) - (drop ? 1 : 0);
  const int64_t ctx = options_.generate.max_context;
  if (ctx > 0 && so_far + static_cast<int64_t>(turn.size()) >= ctx)
    fail("the conversation is {} tokens and this turn adds {}; the model's context is {} positions (/reset starts "
         "over)",
         so_far, turn.size(), ctx);
  if (drop) gen.drop_last();
  answer_ended_at_eos_ = false;
  GenerateResult r = first ? gen.run(turn, options_.generate) : gen.extend(turn, options_.generate);
  if (first && !options_.system.empty()) messages_.push_back({"system", options_.system});
  messages_.push_back({"user", user});
  messages_.push_back({"assistant", r.text});
  answer_ended_at_eos_ = r.stop == StopReason::Eos;
  return r;
}

namespace {

std::string trim(std::string s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && space(s.back())) s.pop_back();
  size_t i = 0;
  while (i < s.size() && space(s[i])) ++i;
  return s.substr(i);
}

constexpr const char* kHelp =
    "  /reset         forget the conversation\n"
    "  /system TEXT   set the system message and start over (/system alone shows it)\n"
    "  /exit          leave (also Ctrl-D, or Ctrl-C twice at the prompt)\n"
    "  Ctrl-C during an answer stops it; the conversation goes on\n";

}  // namespace

void chat_loop(ChatSession& chat, LineReader& in, const ChatLoopIo& io) {
  const auto notice = [&](std::string_view s) {
    if (io.notice) io.notice(s);
  };
  GenerateOptions& g = chat.generate_options();
  const auto shown = g.on_text;
  g.on_text = [&](std::string_view s) {
    if (io.answer) io.answer(s);
  };
  g.interrupt = io.interrupt;
  bool interrupted_at_prompt = false;
  for (;;) {
    std::string line;
    const LineReader::Status status = in.read(io.prompt, line);
    if (status == LineReader::Status::End) break;
    if (status == LineReader::Status::Interrupted) {
      if (interrupted_at_prompt) break;
      interrupted_at_prompt = true;
      notice("(Ctrl-C again, Ctrl-D or /exit to leave)\n");
      continue;
    }
    interrupted_at_prompt = false;
    line = trim(line);
    if (line.empty()) continue;
    if (line[0] == '/') {
      const size_t space = line.find(' ');
      const std::string cmd = line.substr(0, space);
      const std::string arg = space == std::string::npos ? "" : trim(line.substr(space + 1));
      if (cmd == "/exit" || cmd == "/quit") break;
      if (cmd == "/reset") {
        chat.reset();
        notice("(conversation cleared)\n");
      } else if (cmd == "/system") {
        if (arg.empty()) {
          notice(chat.system().empty() ? fmt::format("(system message: the template's default: {})\n",
                                                     chat.chat_template().default_system().empty()
                                                         ? "none"
                                                         : chat.chat_template().default_system())
                                       : fmt::format("(system message: {})\n", chat.system()));
        } else {
          chat.set_system(arg);
          notice("(system message set; conversation cleared)\n");
        }
      } else if (cmd == "/help") {
        notice(kHelp);
      } else {
        notice(fmt::format("unknown command {}; /help lists them\n", cmd));
      }
      continue;
    }
    if (io.interrupt) io.interrupt->store(false);
    GenerateResult r;
    try {
      r = chat.say(line);
    } catch (const Error& e) {
      notice(fmt::format("error: {}\n", e.what()));
      continue;
    }
    if (io.interrupt) io.interrupt->store(false);
    if (io.answer) io.answer("\n");
    if (r.stop == StopReason::Interrupted) notice("(interrupted)\n");
    if (r.stop == StopReason::Context) notice("(the context is full: /reset starts over)\n");
    if (io.on_answer) io.on_answer(line, r);
  }
  g.on_text = shown;
}

}  // namespace onebit
