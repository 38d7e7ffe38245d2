#include "models/model.h"

#include <chrono>
#include <filesystem>
#include <system_error>

#include "base/error.h"
#include "graph/onnx/onnx_loader.h"
#include "npu/dispatcher.h"
#include "ops/register_ops.h"

namespace onebit {

namespace {

int64_t vocab_of(const Graph& g, const CausalLmBinding& b) {
  const Value& v = g.value(g.find_value(b.logits));
  if (v.has_shape && v.dims.size() == 3 && v.dims[2].value > 0) return v.dims[2].value;
  auto it = g.metadata.find("onebit.vocab_size");
  if (it == g.metadata.end()) return 0;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

std::unique_ptr<Model> Model::open(const std::string& path, const ModelOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) fail("{}: cannot open: no such file", path);
  if (fs::is_directory(st)) fail("{}: is a directory; give the .onnx file inside it", path);

  std::unique_ptr<Model> m(new Model());
  m->path_ = path;
  m->files_ = read_model_files(path);
  const std::string tok = options.tokenizer_path.empty() ? m->files_.tokenizer_path : options.tokenizer_path;
  if (!tok.empty()) m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(tok));
  else if (options.need_tokenizer)
    fail("{}: no tokenizer.json beside the model; pass --tokenizer PATH (or --prompt-ids)", path);

  // load_seconds: the file to a session ready to run (the tokenizer apart).
  const auto t0 = std::chrono::steady_clock::now();
  Graph graph = load_onnx(path);
  m->binding_ = bind_causal_lm(graph);

  SessionOptions so = options.session;
  m->npu_ = options.npu;
  so.kernel.npu = m->npu_.get();
  so.last_position_outputs = {m->binding_.logits};  // the generator reads only the last row
  so.kv_state_inputs = m->binding_.past_inputs;     // the cache stays in the session
  if (auto it = graph.metadata.find("onebit.source"); it != graph.metadata.end() &&
                                                      it->second.find("random") != std::string::npos)
    m->random_note_ = it->second;
  m->vocab_ = vocab_of(graph, m->binding_);
  m->session_ = std::make_unique<Session>(std::move(graph), default_op_registry(), so);
  m->generator_ = std::make_unique<Generator>(*m->session_, m->binding_);
  m->load_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  m->eos_ids_ = m->files_.eos_ids;
  if (m->tokenizer_)
    for (const auto& t : m->files_.eos_tokens)
      if (int32_t id = m->tokenizer_->token_to_id(t); id >= 0) m->eos_ids_.push_back(id);
  return m;
}

}  // namespace onebit
