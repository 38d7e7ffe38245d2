#include "models/model.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
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

// The names of the .onnx files in `dir`, sorted.
std::vector<std::string> models_in(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".onnx") out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// The first errors a newcomer meets, each saying what is there instead.
void check_model_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    fs::path dir = fs::path(path).parent_path();
    if (dir.empty()) dir = ".";
    if (!fs::is_directory(dir)) fail("{}: cannot open: no such file, and no directory {}", path, dir.string());
    const std::vector<std::string> near = models_in(dir);
    if (near.empty()) fail("{}: cannot open: no such file, and {} has no .onnx model", path, dir.string());
    fail("{}: cannot open: no such file; {} has {}", path, dir.string(), listed(near));
  }
  if (!fs::is_regular_file(st)) fail("{}: cannot open: not a regular file", path);
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  ::close(fd);
}

}  // namespace

std::unique_ptr<Model> Model::open(const std::string& given, const ModelOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(given, ec)) check_model_path(given);
  const ModelLocation loc = locate_model(given, options.variant);  // a folder: which model, where its side files are
  const std::string& path = loc.model;
  if (loc.layout != "file") check_model_path(path);

  std::unique_ptr<Model> m(new Model());
  m->path_ = path;
  m->location_ = loc;
  m->files_ = read_model_files(path, loc.side_dir);
  const std::string tok = options.tokenizer_path.empty() ? m->files_.tokenizer_path : options.tokenizer_path;
  if (!tok.empty()) m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(tok));
  else if (options.need_tokenizer)
    fail("{}: no tokenizer.json beside the model{}; pass --tokenizer PATH (or --prompt-ids)", path,
         loc.side_dir.empty() ? "" : " nor in " + loc.side_dir);

  // load_seconds: the file to a session ready to run (the tokenizer apart).
  const auto t0 = std::chrono::steady_clock::now();
  Graph graph = load_onnx(path);
  m->binding_ = bind_causal_lm(graph, &m->files_);

  SessionOptions so = options.session;
  m->npu_ = options.npu;
  so.kernel.npu = m->npu_.get();
  so.last_position_outputs = {m->binding_.logits};  // the generator reads only the last rows:
  so.last_rows_input = true;                         // one, or 1 + a lookup draft
  so.kv_state_inputs = m->binding_.past_inputs;     // the cache stays in the session
  if (auto it = graph.metadata.find("onebit.source"); it != graph.metadata.end() &&
                                                      it->second.find("random") != std::string::npos)
    m->random_note_ = it->second;
  m->vocab_ = vocab_of(graph, m->binding_);
  // Ids past the logits would index past the embedding table; a larger
  // vocabulary (padding, as Qwen's) is common and fine.
  if (m->tokenizer_ && m->vocab_ > 0 && static_cast<int64_t>(m->tokenizer_->vocab_size()) > m->vocab_)
    fail("{}: the tokenizer {} has {} ids but the model's logits have {}: it is not this model's tokenizer", path, tok,
         m->tokenizer_->vocab_size(), m->vocab_);
  m->session_ = std::make_unique<Session>(std::move(graph), default_op_registry(), so);
  if (so.kernel.kv_dtype != DType::F32 && so.kernel.kv_dtype != DType::Undefined && !m->session_->keeps_kv_state())
    fail("{}: {} {} KV cache was asked for (--kv-dtype), but this session keeps no KV cache: {}", path,
         so.kernel.kv_dtype == DType::I8 ? "an" : "a", dtype_name(so.kernel.kv_dtype),
         m->binding_.past_inputs.empty() ? "the graph has no past inputs (export it with a cache)"
         : m->session_->pass_report().get("bf16_unfused")
             ? "the graph computes in bfloat16, and its cache stays the graph's own"
             : "its cache stays the graph's own (the kv-state pass is off or refused)");
  m->generator_ = std::make_unique<Generator>(*m->session_, m->binding_);
  m->load_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  m->eos_ids_ = m->files_.eos_ids;
  if (m->tokenizer_)
    for (const auto& t : m->files_.eos_tokens)
      if (int32_t id = m->tokenizer_->token_to_id(t); id >= 0) m->eos_ids_.push_back(id);
  return m;
}

}  // namespace onebit
