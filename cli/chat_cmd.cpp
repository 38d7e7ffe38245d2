// `1bit chat MODEL`: a multi-turn chat in the model's template, keeping the
// KV cache across turns. Answers go to stdout, everything else to stderr;
// with --json each answer is one JSON line instead. stdin may be a pipe:
// each line is a turn.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "base/error.h"
#include "cli/chat_cmd.h"
#include "cli/commands.h"
#include "cli/terminal.h"
#include "models/chat_session.h"
#include "models/model.h"

namespace onebit::cli {

int run_chat(const ChatCommand& c) {
  if (c.gen.max_new < 1) fail("-n/--max-new-tokens must be at least 1, got {}", c.gen.max_new);
  c.gen.sampling.validate();  // before the (slow) load
  ModelOptions mo;
  mo.session = c.session.options();
  mo.npu = c.session.dispatcher();
  mo.tokenizer_path = c.tokenizer;
  mo.variant = c.session.variant;
  mo.need_tokenizer = true;
  std::unique_ptr<Model> model = open_model(c.model, mo);
  if (c.cached && model->binding().cache == CausalLmBinding::Cache::None)
    fail("{}: --cached, but the graph has no KV cache input; export it with scripts/export_onnx.py --cached", c.model);

  std::unique_ptr<Sampler> sampler;
  ChatOptions co;
  co.system = c.system;
  co.generate = c.gen.options_for(*model, sampler);
  ChatSession chat(*model, co);

  const bool terminal = ::isatty(0) != 0;
  if (!c.quiet) {
    if (!model->random_weights_note().empty())
      fmt::print(stderr, "note: {} has random-init weights ({}); its text is not meaningful\n", c.model,
                 model->random_weights_note());
    for (const std::string& note : model->session().pass_report().notes) fmt::print(stderr, "note: {}\n", note);
    fmt::print(stderr, "{} | {} | {}\n", c.model,
               chat.keeps_cache() ? "KV cache kept across turns: each turn prefills only its own tokens"
                                  : "no KV cache: each turn re-runs the whole conversation",
               sampler ? "sampling: " + sampler->params().describe() : std::string("greedy"));
    if (terminal)
      fmt::print(stderr, "/help for commands; Ctrl-C stops an answer, Ctrl-D or /exit leaves (line editing: {})\n",
                 line_editing_library());
  }

  install_interrupt_handler();
  std::unique_ptr<LineReader> reader = make_line_reader();
  ChatLoopIo io;
  io.prompt = terminal ? "> " : "";
  io.interrupt = &interrupt_flag();
  io.notice = [](std::string_view s) {
    std::fflush(stdout);
    std::fwrite(s.data(), 1, s.size(), stderr);
  };
  if (!c.gen.json)
    io.answer = [](std::string_view s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    };
  int turn = 0;
  io.on_answer = [&](const std::string& user, const GenerateResult& r) {
    ++turn;
    if (c.gen.json) {
      Json record = generation_record(*model, r, sampler.get());
      record["turn"] = turn;
      record["user"] = user;
      std::printf("%s\n", json_text(record).c_str());
      std::fflush(stdout);
    } else if (c.verbose) {
      const int64_t steps = r.decode_steps();
      fmt::print(stderr, "[turn {}: prefill {} tokens after {} cached, {:.1f} ms | {} generated ({}) | decode {}]\n",
                 turn, r.prefill_tokens, r.past, r.prefill_ms, r.tokens.size(), stop_reason_name(r.stop),
                 steps > 0 ? fmt::format("{:.2f} ms/token", r.decode_ms / steps) : std::string("-"));
    }
  };
  chat_loop(chat, *reader, io);
  return 0;
}

void add_chat_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("chat", "A multi-turn chat in the model's chat template, on stdin");
  cmd->footer(
      "\nCommands: /reset, /system TEXT, /help, /exit. Ctrl-C stops the current answer; Ctrl-D (or Ctrl-C twice at\n"
      "the prompt) leaves. stdin may be a pipe, one turn per line.\n"
      "\nExamples:\n"
      "  1bit chat model-cached.onnx\n"
      "  1bit chat model-cached.onnx --temperature 0.7 --top-p 0.9 --system \"Answer in one sentence.\"\n"
      "  printf 'Hi\\nWhat is 2+2?\\n' | 1bit chat model-cached.onnx --json\n");
  auto c = std::make_shared<ChatCommand>();
  c->gen.max_new = 256;
  cmd->add_option("model", c->model, "ONNX causal LM with a tokenizer and a ChatML chat template beside it")->required();
  cmd->add_option("--tokenizer", c->tokenizer, "tokenizer.json (default: beside the model)");
  cmd->add_option("--system", c->system, "System message (default: the template's own, if any)");
  c->gen.add_to(cmd);
  cmd->add_flag("--cached", c->cached, "Require the graph's KV cache (one with a cache uses it anyway)");
  c->session.add_to(cmd);
  cmd->add_flag("--quiet,-q", c->quiet, "Print only the answers");
  cmd->add_flag("--verbose,-v", c->verbose, "Print each turn's prefill and decode figures on stderr");
  cmd->callback([c, &action] { action = [c] { return run_chat(*c); }; });
}

}  // namespace onebit::cli
