// The causal-LM façade: one call opens a model and makes it ready to
// generate — the graph loaded, the side files read (tokenizer, generation
// and model configs), inputs and outputs bound, the session created with
// what the generator needs (only the last row of the logits computed, the
// KV cache kept in the session and appended in place) and the
// end-of-sequence ids gathered. `ort-run`, `bench` and the tests all open
// models through here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/session.h"
#include "models/causal_lm.h"
#include "models/generate.h"
#include "models/model_files.h"
#include "models/tokenizer/tokenizer.h"

namespace onebit {

namespace npu {
class Dispatcher;
}

struct ModelOptions {
  SessionOptions session;      // threads, passes, kernel options
  // The NPU dispatcher the session routes integer GEMMs to (null: host
  // only); the model keeps it alive.
  std::shared_ptr<npu::Dispatcher> npu;
  std::string tokenizer_path;  // default: tokenizer.json beside the model
  std::string variant;         // which model of a folder (locate_model)
  bool need_tokenizer = false;  // no tokenizer found is an error (text prompts)
};

class Model {
 public:
  // Errors name the path: a missing or unreadable file, a graph that is not
  // a causal LM (listing its inputs and outputs), a missing tokenizer when
  // one is needed.
  static std::unique_ptr<Model> open(const std::string& path, const ModelOptions& options);

  const std::string& path() const { return path_; }  // the .onnx file (a folder resolved)
  const ModelLocation& location() const { return location_; }
  const ModelFiles& files() const { return files_; }
  const CausalLmBinding& binding() const { return binding_; }
  Session& session() { return *session_; }
  const Session& session() const { return *session_; }
  Generator& generator() { return *generator_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  npu::Dispatcher* npu() const { return npu_.get(); }

  // generation_config / config eos_token_id, and tokenizer_config's
  // eos_token resolved through the tokenizer.
  const std::vector<int64_t>& eos_ids() const { return eos_ids_; }
  int64_t max_positions() const { return files_.max_positions; }  // 0: unknown
  // Vocabulary size: the logits' declared last dim, else the exporter's
  // onebit.vocab_size metadata, else 0 (learnt from the first run).
  int64_t vocab() const { return vocab_; }
  double load_seconds() const { return load_s_; }
  // What scripts/export_onnx.py stamped as the weights' source when it says
  // they are random ("" otherwise): their text means nothing.
  const std::string& random_weights_note() const { return random_note_; }

 private:
  Model() = default;
  std::string path_;
  ModelLocation location_;
  ModelFiles files_;
  CausalLmBinding binding_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::shared_ptr<npu::Dispatcher> npu_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<Generator> generator_;
  std::vector<int64_t> eos_ids_;
  int64_t vocab_ = 0;
  double load_s_ = 0;
  std::string random_note_;
};

}  // namespace onebit
