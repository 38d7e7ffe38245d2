// onnxruntime-genai's float16 CPU attention reads each layer's cache through
// a repeat of its KV heads and a flatten,
//
//   cache [b,kvh,T,d] -Unsqueeze(2)-> -Expand(e)-> -Reshape(r)-> [b,N,T,d]
//       -Transpose(0,2,1,3)-> -Reshape(f)-> [b,T,N·d] -> MultiHeadAttention(q, key, value, attention_bias)
//
// which copies every KV head rep times, then once more to transpose, per
// layer and step. The MultiHeadAttention becomes
//
//   com.onebit::GroupedAttention(q, key cache, value cache, attention_bias, e_k, r_k, f_k, e_v, r_v, f_v)
//
// (ops/attention.cpp), which reads the unrepeated caches; the shapes are
// only known at plan time, where the kernel checks they are that repeat and
// flatten and refuses the plan otherwise. The builder computes e and r from
// the cache's Shape (Gather, Unsqueeze, Concat, Mul, and an Equal / Where
// that maps -1 to 1): ~24 nodes a layer that a plan would evaluate again at
// every step, as the cache grows. When graph/passes/shape_expr.h proves
// both chains' e and r to be the cache's dims with one constant repeat, for
// every cache size, the fused node takes neither (inputs 4, 5, 7, 8
// omitted) but the repeat as attribute kv_repeat: the kernel makes e and r
// from the cache's shape and checks them as it checks the inputs; the
// chains are then dead. The kv-state pass after it can then keep the
// caches in the session. Preconditions: the MultiHeadAttention has no bias,
// key_padding_mask, past or buffer-sharing inputs and only its first
// output; both Reshapes without allowzero.
#include "graph/passes/fusion.h"
#include "graph/passes/match.h"
#include "graph/passes/shape_expr.h"

namespace onebit {

namespace {

struct Chain {
  int cache = -1, expand = -1, reshape = -1, flat = -1;
};

// value -> Reshape(Transpose(Reshape(Expand(Unsqueeze(cache, [2]), e), r), 0,2,1,3), f).
bool match_chain(const Graph& g, int value, Chain& out, const char*& why) {
  const Node* flat = producer_op(g, value, "Reshape");
  if (!flat || flat->inputs.size() < 2) return false;
  const Node* t = producer_op(g, input_at(*flat, 0), "Transpose");
  if (!t) return false;
  const Node* reshape = producer_op(g, input_at(*t, 0), "Reshape");
  if (!reshape || reshape->inputs.size() < 2) return false;
  const Node* expand = producer_op(g, input_at(*reshape, 0), "Expand");
  if (!expand || expand->inputs.size() < 2) return false;
  const Node* unsqueeze = producer_op(g, input_at(*expand, 0), "Unsqueeze");
  if (!unsqueeze || unsqueeze->inputs.size() < 2) return false;
  if (!constant_ints_equal(g, input_at(*unsqueeze, 1), {2})) return why = "unsqueeze_axis", false;
  if (t->attrs.get_ints("perm", {}) != std::vector<int64_t>{0, 2, 1, 3}) return why = "transpose_perm", false;
  if (flat->attrs.get_int("allowzero", 0) != 0 || reshape->attrs.get_int("allowzero", 0) != 0)
    return why = "allowzero", false;
  out = {input_at(*unsqueeze, 0), input_at(*expand, 1), input_at(*reshape, 1), input_at(*flat, 1)};
  return true;
}

struct MhaGroup {
  int node = -1;
  Chain k, v;
  int64_t repeat = 0;  // proven for both chains, or 0
};

Match<MhaGroup> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (n.op_type != "MultiHeadAttention" || n.domain != kMicrosoftDomain) return {};
  MhaGroup m{node, {}, {}};
  const char* why = nullptr;
  const bool k = match_chain(g, input_at(n, 1), m.k, why), v = k && match_chain(g, input_at(n, 2), m.v, why);
  if (!k || !v) return why ? Match<MhaGroup>(Refusal{why}) : Match<MhaGroup>{};
  for (size_t i : {3, 4, 6, 7, 8, 9})
    if (input_at(n, i) >= 0) return Refusal{"optional_input"};
  for (size_t o = 1; o < n.outputs.size(); ++o)
    if (n.outputs[o] >= 0) return Refusal{"present_output"};
  const int64_t rk = proven_repeat(g, m.k.cache, m.k.expand, m.k.reshape);
  if (rk > 0 && proven_repeat(g, m.v.cache, m.v.expand, m.v.reshape) == rk) m.repeat = rk;
  return m;
}

}  // namespace

void fuse_mha_repeat_kv(Graph& g, PassContext& ctx) {
  Fusion<MhaGroup> f;
  f.name = "mha_repeat_kv";
  f.match = match;
  f.apply = [](Graph& g, const MhaGroup& m, std::vector<bool>&, std::map<std::string, int64_t>& counts) {
    Node& n = g.node(m.node);  // keeps its attributes and first output
    const bool proven = m.repeat > 0;
    make_onebit_node(n, "GroupedAttention",
                     {n.inputs[0], m.k.cache, m.v.cache, input_at(n, 5), proven ? -1 : m.k.expand,
                      proven ? -1 : m.k.reshape, m.k.flat, proven ? -1 : m.v.expand, proven ? -1 : m.v.reshape,
                      m.v.flat});
    if (proven) {
      set_int_attr(n, "kv_repeat", m.repeat);
      ++counts["repeat_proven"];
    }
    n.outputs.resize(1);
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
