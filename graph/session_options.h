// What a session is asked to do, typed and validated once. The CLI builds
// these from its flags and the environment (cli/session_flags.h); nothing
// below cli/ reads the environment. KernelOptions is the part kernels see,
// through KernelInfo::options() at create.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"

namespace onebit {

namespace npu {
class Dispatcher;
}

// Activations of every 4-bit weight GEMM (Q4MatMul, MatMulNBits), in every
// pass mode. Auto is what ops/q4_matmul.cpp judges best (int8-block today).
enum class ActPrecision { kAuto, kInt8Row, kInt8Block, kFloat };
inline constexpr ActPrecision kActPrecisions[] = {ActPrecision::kAuto, ActPrecision::kInt8Row,
                                                  ActPrecision::kInt8Block, ActPrecision::kFloat};
const char* act_precision_name(ActPrecision a);  // "auto", "int8-row", "int8-block", "float"
std::optional<ActPrecision> parse_act_precision(std::string_view name);

struct KernelOptions {
  ActPrecision act_precision = ActPrecision::kAuto;
  // Large packed weights faulted in on huge pages while packing: ~10 % faster
  // decode, several times slower load (ops/sgemm.cpp). Off: the hint comes
  // after packing and khugepaged may collapse the pages later.
  bool huge_pages = false;
  // float32 MatMul weights read where the model file maps them (sgemm_weight)
  // instead of copied into packed panels at load: loading takes ~0.02 s
  // instead of ~0.9 s for 2.4 GB and the weights are in memory once (the
  // page cache). Off (--pack-weights): packed once at create, for hosts
  // where page-cache reads are slower than a private copy and for long
  // prompts (docs/BENCHMARK.md, "float32 weights read in place").
  bool map_weights = true;
  bool trace = false;  // kernels and passes log their choices on stderr
  // What a KV cache the session keeps stores (KvAppend, GroupQueryAttention's
  // kept state): F32, F16 at half the bytes (rounded to nearest even
  // once, when a position is appended; attention computes in float32), or
  // I8: int8 codes and a float32 scale per position (ops/kv_store.h).
  // Undefined (the default): the model's own. The Session makes it F16 when
  // every cache input it keeps is float16 (the new keys and values are
  // float16 already, so storing them as float16 is exact, and attention
  // computes on the widened values as for float32: the same logits bit for
  // bit, half the bytes read), F32 otherwise. A kernel given Undefined
  // outside a session stores float32.
  DType kv_dtype = DType::Undefined;
  // The accelerator the session routes integer GEMMs to; null: host only.
  // Owned by whoever made the session (models/, cli/), alive as long as it.
  npu::Dispatcher* npu = nullptr;
};

// The input SessionOptions::last_rows_input adds.
inline constexpr const char* kLastRowsInput = "onebit.last_rows";

struct SessionOptions {
  int threads = 0;           // 0: the machine's cores
  int stop_after_pass = -1;  // -1: every pass; N: passes before N only (bisecting a rewrite)
  bool basic = false;        // constant folding and the QDQ fusion only (parity runs)
  bool qdq_fusion = true;    // off: QDQ groups run node by node (the control run)
  bool q4_fusion = true;     // off: DequantizeLinear(int4) -> MatMul runs node by node
  bool qd8 = false;          // float MatMuls with constant weights as dynamic int8 (qd8)
  bool kv_state = true;      // off: keep the exported cache Concats (control runs)
  bool debug_refusals = false;  // every fusion logs each refused group and why
  bool profile = false;      // time every kernel, by op type
  bool patch_plans = true;   // off: every new input-shape signature is planned afresh (control runs)
  bool regrow_plans = true;  // off: patches always reshape, never repeat the growth before (Plan::Growth; control runs)
  KernelOptions kernel;
  // Outputs whose last row along the sequence axis is all the caller reads
  // (the generator's logits): their LM head computes only that row.
  std::vector<std::string> last_position_outputs;
  // With it, those outputs keep their last R rows instead of one, R the
  // length of a graph input the pass adds, kLastRowsInput (int64 [R], shape
  // only: its data is never read): a pass that verifies drafted tokens reads
  // the logits of each of them (models/lookup.h).
  bool last_rows_input = false;
  // KV-cache inputs (`past`) of a caller that decodes one sequence and does
  // not feed `present` back: the session keeps the cache itself and appends
  // in place (graph/passes/kv_state.cpp). `1bit run` names none.
  std::vector<std::string> kv_state_inputs;
};

}  // namespace onebit
