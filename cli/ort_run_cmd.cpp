// `1bit ort-run MODEL --prompt "..."`: tokenize, prefill, decode greedily,
// stream the text, print prefill tok/s and decode ms/token at the end.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
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

}  // namespace

void add_ort_run_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("ort-run", "Greedy text generation with an exported causal LM");
  cmd->footer(
      "\nExamples:\n"
      "  1bit ort-run model.onnx --prompt \"The capital of France is\" -n 32\n"
      "  1bit ort-run model-cached.onnx --cached --chat --prompt \"Tell me a joke\"\n"
      "  1bit ort-run model.onnx --prompt \"Hi\" --dump-logits logits.npy   # + logits.ids.npy, logits.prompt.npy\n");
  struct Args {
    std::string model, prompt, prompt_ids, tokenizer, dump_logits, system;
    int64_t max_new = 32;
    bool cached = false, chat = false, quiet = false, verbose = false;
    SessionFlags session;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("model", a->model, "ONNX causal LM (exported by scripts/export_onnx.py or Optimum)")->required();
  cmd->add_option("--prompt,-p", a->prompt, "Prompt text");
  cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt as token ids (comma or space separated), bypassing the tokenizer");
  cmd->add_option("-n,--max-new-tokens", a->max_new, "Tokens to generate at most")->capture_default_str();
  cmd->add_flag("--cached", a->cached, "Use the graph's KV cache (the graph must have one; one with a cache uses it anyway)");
  cmd->add_option("--dump-logits", a->dump_logits,
                  "Write each step's logits as float32 [steps, vocab] .npy, the chosen ids beside it (.ids.npy) and "
                  "the prompt ids (.prompt.npy)");
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json (default: beside the model)");
  cmd->add_flag("--chat", a->chat, "Wrap the prompt in the model's chat format (ChatML)");
  cmd->add_option("--system", a->system, "System message for --chat (default: the template's own, if any)");
  a->session.add_to(cmd);
  cmd->add_flag("--quiet,-q", a->quiet, "Print only the generated text");
  cmd->add_flag("--verbose,-v", a->verbose, "Print the binding and the passes");
  cmd->callback([a, &action] {
    action = [a] {
      if (a->max_new < 1) fail("-n/--max-new-tokens must be at least 1, got {}", a->max_new);
      if (a->prompt.empty() == a->prompt_ids.empty()) fail("give exactly one of --prompt and --prompt-ids");
      // Parse the ids before the (slow) load so a typo fails at once.
      std::vector<int32_t> prompt;
      if (!a->prompt_ids.empty()) prompt = parse_token_ids(a->prompt_ids, "--prompt-ids");

      ModelOptions mo;
      mo.session = a->session.options();
      mo.npu = a->session.dispatcher();
      mo.tokenizer_path = a->tokenizer;
      mo.need_tokenizer = !a->prompt.empty();
      std::unique_ptr<Model> model = Model::open(a->model, mo);
      const CausalLmBinding& binding = model->binding();
      Session& session = model->session();
      if (!model->random_weights_note().empty() && !a->quiet)
        fmt::print(stderr, "note: {} has random-init weights ({}); its text is not meaningful\n", a->model,
                   model->random_weights_note());
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
      GenerateOptions gen;
      gen.max_new_tokens = a->max_new;
      gen.max_context = model->max_positions();
      gen.keep_logits = !a->dump_logits.empty();
      gen.eos_ids = model->eos_ids();

      std::unique_ptr<StreamDecoder> stream;
      if (tokenizer) stream = std::make_unique<StreamDecoder>(*tokenizer, /*skip_special=*/true);
      const GenerateResult r = model->generator().run(prompt, gen, [&](int32_t id) {
        if (stream) {
          const std::string piece = stream->push(id);
          std::fwrite(piece.data(), 1, piece.size(), stdout);
        } else {
          std::printf("%d ", id);
        }
        std::fflush(stdout);
      });
      if (stream) {
        const std::string rest = stream->flush();
        std::fwrite(rest.data(), 1, rest.size(), stdout);
      }
      std::printf("\n");
      std::fflush(stdout);

      if (!a->dump_logits.empty()) {
        Tensor logits = Tensor::allocate_uninit(DType::F32, {static_cast<int64_t>(r.tokens.size()), r.vocab});
        std::copy(r.logits.begin(), r.logits.end(), logits.data<float>());
        refuse_same_file(a->dump_logits, a->model, "--dump-logits file");
        write_npy(a->dump_logits, logits);
        write_npy(sibling(a->dump_logits, "ids"), ids_tensor(r.tokens));
        write_npy(sibling(a->dump_logits, "prompt"), ids_tensor(r.prompt));
      }
      if (!a->quiet) {
        const int64_t steps = r.decode_steps();
        fmt::print(stderr, "\n{} prompt tokens, {} generated{} | {} cache | threads {}\n", r.prompt.size(),
                   r.tokens.size(), r.stopped_at_eos ? " (end of sequence)" : r.stopped_at_context ? " (context full)" : "",
                   binding.cache == CausalLmBinding::Cache::None ? "no" : "KV", session.pool().size());
        fmt::print(stderr, "load {:.2f} s | prefill {:.1f} tok/s ({:.1f} ms) | decode {} | peak RSS {:.0f} MiB\n",
                   model->load_seconds(), r.prompt.size() / (r.prefill_ms / 1000.0), r.prefill_ms,
                   steps > 0 ? fmt::format("{:.2f} ms/token, {:.2f} tok/s", r.decode_ms / steps, steps / (r.decode_ms / 1000.0))
                             : std::string("-"),
                   peak_rss_mib());
      }
      if (session.options().profile) fmt::print(stderr, "{}", session.profile_report());
      if (model->npu() && !a->quiet) fmt::print(stderr, "{}\n", model->npu()->summary());
      return 0;
    };
  });
}

}  // namespace onebit::cli
