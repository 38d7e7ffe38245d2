// `1bit ort-run MODEL --prompt "..."`: tokenize, prefill, decode (greedily,
// or sampling when asked), stream the text, print prefill tok/s and decode
// ms/token at the end, or one JSON record with --json.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/text_file.h"
#include "base/thread_pool.h"
#include "cli/chat_cmd.h"
#include "cli/commands.h"
#include "cli/generation_flags.h"
#include "cli/process_stats.h"
#include "cli/session_flags.h"
#include "graph/npy.h"
#include "models/chat.h"
#include "models/model.h"
#include "npu/dispatcher.h"
#include "models/tokenizer/token_ids.h"

namespace onebit::cli {

namespace {

// "foo.npy" -> "foo.<suffix>.npy"
std::string sibling(const std::string& path, const std::string& suffix) {
  std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + "." + suffix + p.extension().string())).string();
}

Tensor ids_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::allocate_uninit(DType::I64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

// --prompt-file: the file's text less one trailing newline ("\n" or
// "\r\n", which an editor adds and `echo` writes; llama.cpp's -f drops a
// trailing "\n" too).
std::string read_prompt_file(const std::string& path) {
  std::string text = read_text_file(path, kMaxTextInputBytes, "--prompt-file");
  if (!text.empty() && text.back() == '\n') {
    text.pop_back();
    if (!text.empty() && text.back() == '\r') text.pop_back();
  }
  if (text.empty()) fail("--prompt-file {}: no prompt in it (empty, or one newline)", text_file_name(path));
  return text;
}

}  // namespace

void add_ort_run_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("ort-run", "Text generation with an exported causal LM (greedy unless asked to sample)");
  cmd->footer(
      "\nExamples:\n"
      "  1bit ort-run model.onnx --prompt \"The capital of France is\" -n 32\n"
      "  1bit ort-run phi3-mini-int4/ --chat --prompt \"Hi\"            # an onnxruntime-genai folder\n"
      "  1bit ort-run SmolLM2-135M-Instruct/ --variant q4 --prompt \"Hi\"  # transformers.js: onnx/model_q4.onnx\n"
      "  1bit ort-run model-cached.onnx --cached --chat --prompt \"Tell me a joke\" --temperature 0.7 --top-p 0.9 --seed 1\n"
      "  1bit ort-run model-cached.onnx --chat --prompt \"List three colours\" --stop \"\\n\\n\" --json\n"
      "  1bit ort-run model-cached.onnx --interactive                     # the same as 1bit chat\n"
      "  1bit ort-run model.onnx --prompt \"Hi\" --dump-logits logits.npy   # + logits.ids.npy, logits.prompt.npy\n");
  struct Args {
    std::string model, prompt, prompt_file, prompt_ids, tokenizer, dump_logits, system;
    bool cached = false, chat = false, interactive = false, quiet = false, verbose = false;
    GenerationFlags gen;
    SessionFlags session;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("model", a->model, "ONNX causal LM: a .onnx file, or a model folder (onnxruntime-genai, transformers.js onnx/, our exports)")->required();
  cmd->add_option("--prompt,-p", a->prompt, "Prompt text");
  cmd->add_option("--prompt-file,-f", a->prompt_file,
                  "Prompt text read from a file ('-': standard input), its bytes as they are but for one trailing "
                  "newline, which is dropped");
  cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt as token ids (comma or space separated), bypassing the tokenizer");
  a->gen.add_to(cmd);
  cmd->add_flag("--cached", a->cached, "Use the graph's KV cache (the graph must have one; one with a cache uses it anyway)");
  cmd->add_option("--dump-logits", a->dump_logits,
                  "Write each step's logits as float32 [steps, vocab] .npy, the chosen ids beside it (.ids.npy) and "
                  "the prompt ids (.prompt.npy)");
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json (default: beside the model)");
  cmd->add_flag("--chat", a->chat, "Wrap the prompt in the model's chat format (ChatML)");
  cmd->add_flag("--interactive,-i", a->interactive, "A multi-turn chat on stdin (see 1bit chat)");
  cmd->add_option("--system", a->system, "System message for --chat (default: the template's own, if any)");
  a->session.add_to(cmd);
  cmd->add_flag("--quiet,-q", a->quiet, "Print only the generated text");
  cmd->add_flag("--verbose,-v", a->verbose, "Print the binding and the passes");
  cmd->callback([a, &action] {
    action = [a] {
      if (a->gen.max_new < 1) fail("-n/--max-new-tokens must be at least 1, got {}", a->gen.max_new);
      a->gen.sampling.validate();  // before the (slow) load
      if (a->interactive) {
        if (!a->prompt.empty() || !a->prompt_file.empty() || !a->prompt_ids.empty() || !a->dump_logits.empty())
          fail("--interactive reads the conversation from stdin: drop --prompt, --prompt-file, --prompt-ids and "
               "--dump-logits");
        ChatCommand c{a->model, a->tokenizer, a->system, a->cached, a->quiet, a->verbose, a->gen, a->session};
        return run_chat(c);
      }
      if (!a->prompt.empty() + !a->prompt_file.empty() + !a->prompt_ids.empty() != 1)
        fail("give exactly one of --prompt, --prompt-file and --prompt-ids");
      // Read the file and parse the ids before the (slow) load so a typo fails at once.
      if (!a->prompt_file.empty()) a->prompt = read_prompt_file(a->prompt_file);
      std::vector<int32_t> prompt;
      if (!a->prompt_ids.empty()) prompt = parse_token_ids(a->prompt_ids, "--prompt-ids");

      ModelOptions mo;
      mo.session = a->session.options();
      mo.npu = a->session.dispatcher();
      mo.tokenizer_path = a->tokenizer;
      mo.variant = a->session.variant;
      mo.need_tokenizer = !a->prompt.empty() || !a->gen.stop.empty();
      std::unique_ptr<Model> model = open_model(a->model, mo);
      const CausalLmBinding& binding = model->binding();
      Session& session = model->session();
      if (!model->random_weights_note().empty() && !a->quiet)
        fmt::print(stderr, "note: {} has random-init weights ({}); its text is not meaningful\n", a->model,
                   model->random_weights_note());
      if (!a->quiet)
        for (const std::string& note : session.pass_report().notes) fmt::print(stderr, "note: {}\n", note);
      if (const ModelLocation& loc = model->location(); loc.layout != "file" && !a->quiet && !a->gen.json)
        fmt::print(stderr, "{} ({} layout): {}\n", a->model, loc.layout, loc.model);
      if (a->cached && binding.cache == CausalLmBinding::Cache::None)
        fail("{}: --cached, but the graph has no KV cache input (past, or past_key_values.N.key/value); export it "
             "with scripts/export_onnx.py --cached",
             a->model);
      if (a->verbose) {
        fmt::print(stderr, "binding: {}\n", describe(binding));
        for (const auto& line : session.pass_report().log) fmt::print(stderr, "{}\n", line);
      }

      const Tokenizer* tokenizer = model->tokenizer();
      if (prompt.empty()) {
        const ModelFiles& files = model->files();
        const std::string text =
            a->chat ? apply_chat_template(files.chat_template, a->prompt, a->system, files.dir) : a->prompt;
        prompt = tokenizer->encode(text);
      }
      // -n past the context is an error, not a silent clamp: the run would
      // otherwise end early for a reason the caller did not choose.
      const int64_t ctx = model->max_positions();
      const int64_t need = static_cast<int64_t>(prompt.size()) + a->gen.max_new;
      if (ctx > 0 && static_cast<int64_t>(prompt.size()) < ctx && need > ctx)
        fail("-n {}: the {}-token prompt and {} new tokens need {} positions, but {}'s context is {} ({}); use -n {} "
             "or less",
             a->gen.max_new, prompt.size(), a->gen.max_new, need, a->model, ctx, model->files().max_positions_from,
             ctx - static_cast<int64_t>(prompt.size()));

      std::unique_ptr<Sampler> sampler;
      GenerateOptions gen = a->gen.options_for(*model, sampler);
      gen.keep_logits = !a->dump_logits.empty();
      gen.tokenizer = tokenizer;
      const bool stream = !a->gen.json;
      gen.on_text = [&](std::string_view piece) {
        if (!stream) return;
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      };
      Progress prefill(fmt::format("prefill of {} tokens", prompt.size()));
      const GenerateResult r = model->generator().run(prompt, gen, [&](int32_t id) {
        prefill.done();
        if (!tokenizer && stream) {
          std::printf("%d ", id);
          std::fflush(stdout);
        }
      });
      prefill.done();
      if (a->gen.json) {
        Json record = generation_record(*model, r, sampler.get());
        if (!a->prompt.empty()) record["prompt"] = a->prompt;
        std::printf("%s\n", json_text(record).c_str());
      } else {
        std::printf("\n");
      }
      std::fflush(stdout);

      if (!a->dump_logits.empty()) {
        Tensor logits = Tensor::allocate_uninit(DType::F32, {static_cast<int64_t>(r.tokens.size()), r.vocab});
        std::copy(r.logits.begin(), r.logits.end(), logits.data<float>());
        refuse_same_file(a->dump_logits, a->model, "--dump-logits file");
        write_npy(a->dump_logits, logits);
        write_npy(sibling(a->dump_logits, "ids"), ids_tensor(r.tokens));
        write_npy(sibling(a->dump_logits, "prompt"), ids_tensor(r.prompt));
      }
      if (!a->quiet && !a->gen.json) {
        const int64_t steps = r.decode_steps();
        const char* why = r.stop == StopReason::Eos          ? " (end of sequence)"
                          : r.stop == StopReason::StopString ? " (stop string)"
                          : r.stop == StopReason::Context    ? " (context full)"
                                                             : "";
        fmt::print(stderr, "\n{} prompt tokens, {} generated{} | {} cache | threads {}{}\n", r.prompt.size(),
                   r.tokens.size(), why,
                   binding.cache == CausalLmBinding::Cache::None ? "no"
                   : session.options().kernel.kv_dtype == DType::F16 ? "KV (float16)"
                   : session.options().kernel.kv_dtype == DType::I8  ? "KV (int8)"
                                                                      : "KV",
                   session.pool().size(), sampler ? " | sampling: " + sampler->params().describe() : std::string());
        fmt::print(stderr, "load {:.2f} s | prefill {:.1f} tok/s ({:.1f} ms) | decode {} | peak RSS {:.0f} MiB\n",
                   model->load_seconds(), r.prompt.size() / (r.prefill_ms / 1000.0), r.prefill_ms,
                   steps > 0 ? fmt::format("{:.2f} ms/token, {:.2f} tok/s", r.decode_ms / steps, steps / (r.decode_ms / 1000.0))
                             : std::string("-"),
                   peak_rss_mib());
        if (a->gen.lookup > 0)
          fmt::print(stderr, "lookup: {} passes for {} tokens; {} of {} drafted tokens kept\n", r.passes, r.tokens.size(),
                     r.accepted, r.drafted);
      }
      if (session.options().profile) fmt::print(stderr, "{}", session.profile_report());
      if (model->npu() && !a->quiet) fmt::print(stderr, "{}\n", model->npu()->summary());
      return 0;
    };
  });
}

}  // namespace onebit::cli
