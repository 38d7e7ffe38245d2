// The one place that picks microkernel families by CPU features; ops and
// drivers ask here and never test the CPU themselves. What each level means
// is base/cpu_features.h's cpu_supports(); the cap is set_isa_limit().
//   scalar      the reference twins
//   avx2        A8W8 widened to int16 + vpmaddwd; Q4 int8 by vpmaddubsw
//               (exact for 4-bit weights), Q4 float by FMA
//   avx512      as avx2 for the int8 paths, AVX-512 FMA for Q4 float
//   avx512vnni  vpdpbusd for every int8 path, AVX-512 FMA for Q4 float
//   amx         avx512vnni, with the int8 prompt tiles of Q4 and A8W8 on
//               the AMX tile unit (tdpbusd / tdpbssd / tdpbsud); every
//               other family avx512vnni's
// AVX-VNNI on 256-bit registers (this CPU has it too) is not used: every
// CPU with it here also has the 512-bit form.
#include "quant/ukernels/kernel_config.h"

#include "quant/ukernels/f32_ukernels.h"

namespace onebit {

namespace {

// KC: the deepest K block whose MR×KC micro-panel of A stays in L1 while B
// streams from L2. Measured on Sapphire Rapids (M = 120, K = 1024, N = 2048,
// one thread): KC 256 → 122 GFLOP/s, 512 → 131, 1024 → 134-148.
const SgemmConfig kScalar{Isa::Scalar, kF32ScalarMR, kF32ScalarNR, 256,
                          f32_gemm_ukernel_4x8__scalar, f32_gemv_ukernel_1x8__scalar, f32_dot_ukernel_4xn__scalar,
                          "f32_gemm_ukernel_4x8__scalar", "f32_gemv_ukernel_1x8__scalar",
                          "f32_dot_ukernel_4xn__scalar", f32_axpy_ukernel_8x__scalar,
                          "f32_axpy_ukernel_8x__scalar"};
const SgemmConfig kAvx2{Isa::Avx2, kF32Avx2MR, kF32Avx2NR, 1024,
                        f32_gemm_ukernel_6x16__avx2, f32_gemv_ukernel_1x16__avx2, f32_dot_ukernel_4xn__avx2,
                        "f32_gemm_ukernel_6x16__avx2", "f32_gemv_ukernel_1x16__avx2",
                          "f32_dot_ukernel_4xn__avx2", f32_axpy_ukernel_8x__avx2,
                          "f32_axpy_ukernel_8x__avx2"};
const SgemmConfig kAvx512{Isa::Avx512, kF32Avx512MR, kF32Avx512NR, 1024,
                          f32_gemm_ukernel_12x32__avx512, f32_gemv_ukernel_1x32__avx512, f32_dot_ukernel_4xn__avx512,
                          "f32_gemm_ukernel_12x32__avx512", "f32_gemv_ukernel_1x32__avx512",
                          "f32_dot_ukernel_4xn__avx512", f32_axpy_ukernel_8x__avx512,
                          "f32_axpy_ukernel_8x__avx512"};

const VecMathConfig kVecScalar{Isa::Scalar, f32_vexp_ukernel__scalar, f32_vsigmoid_ukernel__scalar,
                               "f32_vexp_ukernel__scalar", "f32_vsigmoid_ukernel__scalar",
                               f16_f32_vcvt_ukernel__scalar, f32_f16_vcvt_ukernel__scalar,
                               f32_vargmax_ukernel__scalar, "f32_vargmax_ukernel__scalar",
                               f32_qs8_vquant_blocks_ukernel__scalar, "f32_qs8_vquant_blocks_ukernel__scalar",
                               f32_f16_vscaleadd_ukernel__scalar, f32_vsoftmax_ukernel__scalar};
const VecMathConfig kVecAvx2{Isa::Avx2, f32_vexp_ukernel__avx2, f32_vsigmoid_ukernel__avx2, "f32_vexp_ukernel__avx2",
                             "f32_vsigmoid_ukernel__avx2", f16_f32_vcvt_ukernel__avx2, f32_f16_vcvt_ukernel__avx2,
                             f32_vargmax_ukernel__avx2, "f32_vargmax_ukernel__avx2",
                             f32_qs8_vquant_blocks_ukernel__avx2, "f32_qs8_vquant_blocks_ukernel__avx2",
                             f32_f16_vscaleadd_ukernel__avx2, f32_vsoftmax_ukernel__avx2};
// AVX-512: exp, sigmoid, the Softmax row, the float16 conversions and the score chain on 16
// lanes, each lane the AVX2 lane's operations (bit for bit the same);
// argmax and the int8 blocks stay AVX2.
const VecMathConfig kVecAvx512{Isa::Avx512, f32_vexp_ukernel__avx512, f32_vsigmoid_ukernel__avx512,
                               "f32_vexp_ukernel__avx512", "f32_vsigmoid_ukernel__avx512",
                               f16_f32_vcvt_ukernel__avx512, f32_f16_vcvt_ukernel__avx512,
                               f32_vargmax_ukernel__avx2, "f32_vargmax_ukernel__avx2",
                               f32_qs8_vquant_blocks_ukernel__avx2, "f32_qs8_vquant_blocks_ukernel__avx2",
                               f32_f16_vscaleadd_ukernel__avx512, f32_vsoftmax_ukernel__avx512};

#define Q8_FAMILY(gemm, gemv, pack) {gemm<false>, gemm<true>}, {gemv<false>, gemv<true>}, #gemm, #gemv, pack, #pack

const Q8GemmConfig kQ8Scalar{
    Isa::Scalar, kQ8ScalarMR, kQ8ScalarNR, kQ8ScalarKR, kQ8ScalarNR, kQ8ScalarNR, false,
    Q8_FAMILY(q8_gemm_ukernel_2x8c4__scalar, q8_gemv_ukernel_1x8c4__scalar, q8_pack_ukernel_c4__scalar),
    {nullptr, nullptr}, 0, ""};
const Q8GemmConfig kQ8Avx2{
    Isa::Avx2, kQ8Avx2MR, kQ8Avx2NR, kQ8Avx2KR, kQ8Avx2NR, kQ8Avx2GemvNC, true,
    Q8_FAMILY(q8_gemm_ukernel_4x16c2__avx2, q8_gemv_ukernel_1x32c2__avx2, q8_pack_ukernel_c2__avx2),
    {nullptr, nullptr}, 0, ""};
const Q8GemmConfig kQ8Vnni{
    Isa::Avx512Vnni, kQ8VnniMR, kQ8VnniNR, kQ8VnniKR, kQ8VnniGemmNC, kQ8VnniGemvNC, false,
    Q8_FAMILY(q8_gemm_ukernel_8x32c4__avx512vnni, q8_gemv_ukernel_1x64c4__avx512vnni, q8_pack_ukernel_c4__avx2),
    {q8_gemv_streams_ukernel_1x16s4__avx512vnni<false>, q8_gemv_streams_ukernel_1x16s4__avx512vnni<true>}, 4,
    "q8_gemv_streams_ukernel_1x16s4__avx512vnni"};
// The decode prefetch into L2, not L1: on AMD before family 0x1A (with VNNI:
// Zen 4), 9-13 % faster a one-thread step there (docs/BENCHMARK.md "The
// int8 decode prefetch on Zen 4"; Zen 5 not measured, so it keeps the first).
const Q8GemmConfig kQ8VnniL2 = [] {
  Q8GemmConfig c = kQ8Vnni;
  c.gemv_streams[0] = q8_gemv_streams_ukernel_1x16s4__avx512vnni_l2<false>;
  c.gemv_streams[1] = q8_gemv_streams_ukernel_1x16s4__avx512vnni_l2<true>;
  c.gemv_streams_name = "q8_gemv_streams_ukernel_1x16s4__avx512vnni_l2";
  return c;
}();
#undef Q8_FAMILY

// Rows of a Q4 family: {int8-row, int8-block, float} kernels, each {no zp, zp}.
#define Q4_ROW(k, A) {k<A, false>, k<A, true>}

const Q4GemmConfig kQ4Scalar{
    Isa::Scalar,
    {4, 4, 4},
    {16, 16, 16},
    {Q4_ROW(q4_gemm_ukernel_4x16c8__scalar, Q4Act::kInt8Row), Q4_ROW(q4_gemm_ukernel_4x16c8__scalar, Q4Act::kInt8Block),
     Q4_ROW(q4_gemm_ukernel_4x16c8__scalar, Q4Act::kFloat)},
    {Q4_ROW(q4_gemm_ukernel_4x16c8__scalar, Q4Act::kInt8Row), Q4_ROW(q4_gemm_ukernel_4x16c8__scalar, Q4Act::kInt8Block),
     Q4_ROW(q4_gemm_ukernel_4x16c8__scalar, Q4Act::kFloat)},
    {"q4_gemm_ukernel_4x16c8__scalar", "q4_gemm_ukernel_4x16c8__scalar", "q4_gemm_ukernel_4x16c8__scalar"},
    {"q4_gemm_ukernel_4x16c8__scalar", "q4_gemm_ukernel_4x16c8__scalar", "q4_gemm_ukernel_4x16c8__scalar"},
    q4_pack_ukernel_8x16__scalar, "q4_pack_ukernel_8x16__scalar", {nullptr, nullptr, nullptr}, 0, {"", "", ""}};

const Q4GemmConfig kQ4Avx2{
    Isa::Avx2,
    {2, 2, 2},
    {32, 32, 32},
    {Q4_ROW(q4_gemm_ukernel_2x16c8__avx2, Q4Act::kInt8Row), Q4_ROW(q4_gemm_ukernel_2x16c8__avx2, Q4Act::kInt8Block),
     Q4_ROW(q4_gemm_ukernel_2x16c8__avx2, Q4Act::kFloat)},
    {Q4_ROW(q4_gemv_ukernel_1x32c8__avx2, Q4Act::kInt8Row), Q4_ROW(q4_gemv_ukernel_1x32c8__avx2, Q4Act::kInt8Block),
     Q4_ROW(q4_gemv_ukernel_1x32c8__avx2, Q4Act::kFloat)},
    {"q4_gemm_ukernel_2x16c8__avx2", "q4_gemm_ukernel_2x16c8__avx2", "q4_gemm_ukernel_2x16c8__avx2"},
    {"q4_gemv_ukernel_1x32c8__avx2", "q4_gemv_ukernel_1x32c8__avx2", "q4_gemv_ukernel_1x32c8__avx2"},
    q4_pack_ukernel_8x16__avx2, "q4_pack_ukernel_8x16__avx2",
    {q4_gemv_streams_ukernel_1x16s2__avx2<Q4Act::kInt8Row>, q4_gemv_streams_ukernel_1x16s2__avx2<Q4Act::kInt8Block>,
     nullptr},
    2,
    {"q4_gemv_streams_ukernel_1x16s2__avx2", "q4_gemv_streams_ukernel_1x16s2__avx2", ""}};

const Q4GemmConfig kQ4Avx512{
    Isa::Avx512,
    {2, 2, 8},
    {32, 32, 64},
    {Q4_ROW(q4_gemm_ukernel_2x16c8__avx2, Q4Act::kInt8Row), Q4_ROW(q4_gemm_ukernel_2x16c8__avx2, Q4Act::kInt8Block),
     Q4_ROW(q4_gemm_ukernel_8x16c8__avx512, Q4Act::kFloat)},
    {Q4_ROW(q4_gemv_ukernel_1x32c8__avx2, Q4Act::kInt8Row), Q4_ROW(q4_gemv_ukernel_1x32c8__avx2, Q4Act::kInt8Block),
     Q4_ROW(q4_gemv_ukernel_1x64c8__avx512, Q4Act::kFloat)},
    {"q4_gemm_ukernel_2x16c8__avx2", "q4_gemm_ukernel_2x16c8__avx2", "q4_gemm_ukernel_8x16c8__avx512"},
    {"q4_gemv_ukernel_1x32c8__avx2", "q4_gemv_ukernel_1x32c8__avx2", "q4_gemv_ukernel_1x64c8__avx512"},
    q4_pack_ukernel_8x16__avx2, "q4_pack_ukernel_8x16__avx2",
    {q4_gemv_streams_ukernel_1x16s2__avx2<Q4Act::kInt8Row>, q4_gemv_streams_ukernel_1x16s2__avx2<Q4Act::kInt8Block>,
     nullptr},
    2,
    {"q4_gemv_streams_ukernel_1x16s2__avx2", "q4_gemv_streams_ukernel_1x16s2__avx2", ""}};

const Q4GemmConfig kQ4Vnni{
    Isa::Avx512Vnni,
    {8, 8, 8},
    {64, 64, 64},
    {Q4_ROW(q4_gemm_ukernel_8x16c8__avx512vnni, Q4Act::kInt8Row),
     Q4_ROW(q4_gemm_ukernel_8x16c8__avx512vnni, Q4Act::kInt8Block),
     Q4_ROW(q4_gemm_ukernel_8x16c8__avx512, Q4Act::kFloat)},
    {Q4_ROW(q4_gemv_ukernel_1x64c8__avx512vnni, Q4Act::kInt8Row),
     Q4_ROW(q4_gemv_ukernel_1x64c8__avx512vnni, Q4Act::kInt8Block),
     Q4_ROW(q4_gemv_ukernel_1x64c8__avx512, Q4Act::kFloat)},
    {"q4_gemm_ukernel_8x16c8__avx512vnni", "q4_gemm_ukernel_8x16c8__avx512vnni", "q4_gemm_ukernel_8x16c8__avx512"},
    {"q4_gemv_ukernel_1x64c8__avx512vnni", "q4_gemv_ukernel_1x64c8__avx512vnni", "q4_gemv_ukernel_1x64c8__avx512"},
    q4_pack_ukernel_8x16__avx2, "q4_pack_ukernel_8x16__avx2",
    {q4_gemv_streams_ukernel_1x16s4__avx512vnni<Q4Act::kInt8Row>,
     q4_gemv_streams_ukernel_1x16s4__avx512vnni<Q4Act::kInt8Block>, nullptr},
    4,
    {"q4_gemv_streams_ukernel_1x16s4__avx512vnni", "q4_gemv_streams_ukernel_1x16s4__avx512vnni", ""},
    true};
#undef Q4_ROW
// The VNNI family with another decode prefetch: its int8 streams kernels
// and their name.
Q4GemmConfig vnni_decode(Q4GemvStreamsUkernel row, Q4GemvStreamsUkernel block, const char* name) {
  Q4GemmConfig c = kQ4Vnni;
  c.gemv_streams[int(Q4Act::kInt8Row)] = row;
  c.gemv_streams[int(Q4Act::kInt8Block)] = block;
  c.gemv_streams_name[int(Q4Act::kInt8Row)] = c.gemv_streams_name[int(Q4Act::kInt8Block)] = name;
  return c;
}
// Zen 5 and later: the decode prefetch 1 KiB ahead into L1
// (quant/ukernels/q4_gemm__avx512vnni.cpp). On Zen 4 it was 20–30 % slower
// a one-thread step than the 4 KiB L2 prefetch (docs/BENCHMARK.md "A Zen 4
// VM").
const Q4GemmConfig kQ4VnniL1 = vnni_decode(q4_gemv_streams_ukernel_1x16s4__avx512vnni_l1pf<Q4Act::kInt8Row>,
                                           q4_gemv_streams_ukernel_1x16s4__avx512vnni_l1pf<Q4Act::kInt8Block>,
                                           "q4_gemv_streams_ukernel_1x16s4__avx512vnni_l1pf");
// Zen 4 (AMD family 0x19 with AVX-512 VNNI): 1.5 KiB ahead into L2, 5 %
// faster a one-thread step there than 4 KiB (docs/BENCHMARK.md "The Zen 4
// decode prefetch, nearer").
const Q4GemmConfig kQ4VnniL2Near = vnni_decode(q4_gemv_streams_ukernel_1x16s4__avx512vnni_l2near<Q4Act::kInt8Row>,
                                               q4_gemv_streams_ukernel_1x16s4__avx512vnni_l2near<Q4Act::kInt8Block>,
                                               "q4_gemv_streams_ukernel_1x16s4__avx512vnni_l2near");

// The VNNI family's decode prefetch for this CPU: by vendor and generation.
const Q4GemmConfig& q4_vnni_for_this_cpu() {
  const CpuFeatures& f = cpu_features();
  if (!f.amd()) return kQ4Vnni;
  return f.family >= 0x1A ? kQ4VnniL1 : kQ4VnniL2Near;
}

// AMX: the VNNI family this CPU is given, its int8 prompt tiles on the
// tile unit, up to 64 rows a call (quant/ukernels/q4_gemm__amx.cpp).
const Q4GemmConfig& q4_amx_for_this_cpu() {
  static const Q4GemmConfig amx = [] {
    Q4GemmConfig c = q4_vnni_for_this_cpu();
    c.isa = Isa::Amx;
    const int row = int(Q4Act::kInt8Row), block = int(Q4Act::kInt8Block);
    c.mr[row] = c.mr[block] = 64;
    c.gemm[row][0] = q4_gemm_ukernel_64x16c32__amx<Q4Act::kInt8Row, false>;
    c.gemm[row][1] = q4_gemm_ukernel_64x16c32__amx<Q4Act::kInt8Row, true>;
    c.gemm[block][0] = q4_gemm_ukernel_64x16c32__amx<Q4Act::kInt8Block, false>;
    c.gemm[block][1] = q4_gemm_ukernel_64x16c32__amx<Q4Act::kInt8Block, true>;
    c.gemm_name[row] = c.gemm_name[block] = "q4_gemm_ukernel_64x16c32__amx";
    return c;
  }();
  return amx;
}

// The VNNI family's decode prefetch for this CPU: by vendor and generation.
const Q8GemmConfig& q8_vnni_for_this_cpu() {
  return cpu_features().amd() && cpu_features().family < 0x1A ? kQ8VnniL2 : kQ8Vnni;
}

// AMX: the VNNI family this CPU is given, its prompt tiles on the tile unit,
// up to 32 rows a call (quant/ukernels/q8_gemm__amx.cpp).
const Q8GemmConfig& q8_amx_for_this_cpu() {
  static const Q8GemmConfig amx = [] {
    Q8GemmConfig c = q8_vnni_for_this_cpu();
    c.isa = Isa::Amx;
    c.mr = 32;
    c.gemm[0] = q8_gemm_ukernel_32x32c4__amx<false>;
    c.gemm[1] = q8_gemm_ukernel_32x32c4__amx<true>;
    c.gemm_name = "q8_gemm_ukernel_32x32c4__amx";
    return c;
  }();
  return amx;
}

}  // namespace

const Q8GemmConfig* q8_gemm_config_for(Isa isa) {
  if (!cpu_supports(isa)) return nullptr;
  switch (isa) {
    case Isa::Scalar: return &kQ8Scalar;
    case Isa::Avx2:
    case Isa::Avx512: return &kQ8Avx2;  // no 512-bit family without VNNI
    case Isa::Avx512Vnni: return &q8_vnni_for_this_cpu();
    case Isa::Amx: return &q8_amx_for_this_cpu();
  }
  return nullptr;
}

std::vector<const Q8GemmConfig*> q8_gemm_config_variants(Isa isa) {
  if (!cpu_supports(isa)) return {};
  if (isa == Isa::Avx512Vnni) return {&kQ8Vnni, &kQ8VnniL2};
  return {q8_gemm_config_for(isa)};
}

const Q8GemmConfig& q8_gemm_config() {
  static const Q8GemmConfig& chosen = *q8_gemm_config_for(isa_limit());
  return chosen;
}

const Q4GemmConfig* q4_gemm_config_for(Isa isa) {
  if (!cpu_supports(isa)) return nullptr;
  switch (isa) {
    case Isa::Scalar: return &kQ4Scalar;
    case Isa::Avx2: return &kQ4Avx2;
    case Isa::Avx512: return &kQ4Avx512;
    case Isa::Avx512Vnni: return &q4_vnni_for_this_cpu();
    case Isa::Amx: return &q4_amx_for_this_cpu();
  }
  return nullptr;
}

std::vector<const Q4GemmConfig*> q4_gemm_config_variants(Isa isa) {
  if (!cpu_supports(isa)) return {};
  if (isa == Isa::Avx512Vnni) return {&kQ4Vnni, &kQ4VnniL1, &kQ4VnniL2Near};
  if (isa == Isa::Amx) return {&q4_amx_for_this_cpu()};
  return {q4_gemm_config_for(isa)};
}

const Q4GemmConfig& q4_gemm_config() {
  static const Q4GemmConfig& chosen = *q4_gemm_config_for(isa_limit());
  return chosen;
}

const SgemmConfig* sgemm_config_for(Isa isa) {
  if (!cpu_supports(isa)) return nullptr;
  switch (isa) {
    case Isa::Scalar: return &kScalar;
    case Isa::Avx2: return &kAvx2;
    case Isa::Avx512:
    case Isa::Avx512Vnni:
    case Isa::Amx: return &kAvx512;
  }
  return nullptr;
}

const SgemmConfig& sgemm_config() {
  static const SgemmConfig& chosen = *sgemm_config_for(isa_limit());
  return chosen;
}

#define F16W_TILE(name, mr) name, #name, name, mr, #name
#define F16W_STREAMS(name, streams) name, streams, #name
const F16wGemmConfig kF16wScalar{Isa::Scalar, F16W_TILE(f32_f16w_gemm_ukernel_4x16__scalar, kF16wMR), nullptr, 0,
                                 ""};
// AVX2: two streams (each stream's four chains take 4 of the 16 registers,
// its loads and widenings more).
const F16wGemmConfig kF16wAvx2{Isa::Avx2, F16W_TILE(f32_f16w_gemm_ukernel_4x16__avx2, kF16wMR),
                               F16W_STREAMS(f32_f16w_gemv_streams_ukernel_1x16s2__avx2, 2)};
// One AVX-512 tile for decode (up to kF16wMR rows, its panel prefetched into
// L2 8 KiB ahead: 7-9 % faster a step than the AVX2 tile on a Xeon; four
// adjacent panels side by side had measured slower) and prompts (12 rows);
// one row on the streams kernel, four panels a quarter of a thread's share
// apart side by side (four long streams: 5-9 % faster a step,
// docs/BENCHMARK.md).
const F16wGemmConfig kF16wAvx512{Isa::Avx512, F16W_TILE(f32_f16w_gemm_ukernel_12x16__avx512, kF16wWideMR),
                                 F16W_STREAMS(f32_f16w_gemv_streams_ukernel_1x16s4__avx512, 4)};
// The same with each decode stream prefetched 1 KiB ahead, not 2: on AMD
// before family 0x1A (with AVX-512: Zen 4), 9-12 % faster a one-thread step
// there (docs/BENCHMARK.md "The float16 decode prefetch on Zen 4"; Zen 5
// not measured, so it keeps the first).
const F16wGemmConfig kF16wAvx512Near{Isa::Avx512, F16W_TILE(f32_f16w_gemm_ukernel_12x16__avx512, kF16wWideMR),
                                     F16W_STREAMS(f32_f16w_gemv_streams_ukernel_1x16s4__avx512_l2near, 4)};
#undef F16W_STREAMS
#undef F16W_TILE

const F16wGemmConfig* f16w_gemm_config_for(Isa isa) {
  if (!cpu_supports(isa)) return nullptr;
  if (isa == Isa::Scalar) return &kF16wScalar;
  if (isa == Isa::Avx2) return &kF16wAvx2;
  const CpuFeatures& f = cpu_features();
  return f.amd() && f.family < 0x1A ? &kF16wAvx512Near : &kF16wAvx512;
}

std::vector<const F16wGemmConfig*> f16w_gemm_config_variants(Isa isa) {
  if (!cpu_supports(isa)) return {};
  if (isa == Isa::Avx512 || isa == Isa::Avx512Vnni || isa == Isa::Amx) return {&kF16wAvx512, &kF16wAvx512Near};
  return {f16w_gemm_config_for(isa)};
}

const F16wGemmConfig& f16w_gemm_config() {
  static const F16wGemmConfig& chosen = *f16w_gemm_config_for(isa_limit());
  return chosen;
}

#define KV_FAMILY(level, isa, qk, pv)                                                                   \
  {level, f16_f32_vcvt_ukernel__##isa, f32_f16_vcvt_ukernel__##isa, f32_##qk##__##isa, f32_f16_##qk##__##isa, \
   f32_##pv##__##isa, f32_f16_##pv##__##isa, f32_q8_##qk##__##isa, f32_q8_##pv##__##isa,                       \
   "f32_" #qk "__" #isa, "f32_" #pv "__" #isa}
const KvConfig kKvScalar KV_FAMILY(Isa::Scalar, scalar, qk_ukernel_2x4, pv_ukernel_2x32);
const KvConfig kKvAvx2 KV_FAMILY(Isa::Avx2, avx2, qk_ukernel_2x4, pv_ukernel_2x32);
#undef KV_FAMILY

// AVX-512: 16-lane conversions; Q·Kᵀ as AVX2 computes it with 4-row blocks
// for prompts; a P·V whose 32 registers hold a whole 128-wide value row for
// two query rows.
const KvConfig kKvAvx512{Isa::Avx512, f16_f32_vcvt_ukernel__avx512, f32_f16_vcvt_ukernel__avx512,
                         f32_qk_ukernel_4x4__avx512, f32_f16_qk_ukernel_4x4__avx512, f32_pv_ukernel_2x128__avx512,
                         f32_f16_pv_ukernel_2x128__avx512, f32_q8_qk_ukernel_4x4__avx512,
                         f32_q8_pv_ukernel_2x128__avx512, "f32_qk_ukernel_4x4__avx512", "f32_pv_ukernel_2x128__avx512"};

const KvConfig* kv_config_for(Isa isa) {
  if (!cpu_supports(isa)) return nullptr;
  switch (isa) {
    case Isa::Scalar: return &kKvScalar;
    case Isa::Avx2: return &kKvAvx2;
    case Isa::Avx512:
    case Isa::Avx512Vnni:
    case Isa::Amx: return &kKvAvx512;
  }
  return nullptr;
}

const KvConfig& kv_config() {
  static const KvConfig& chosen = *kv_config_for(isa_limit());
  return chosen;
}

const VecMathConfig* vec_math_config_for(Isa isa) {
  if (!cpu_supports(isa)) return nullptr;
  switch (isa) {
    case Isa::Scalar: return &kVecScalar;
    case Isa::Avx2: return &kVecAvx2;
    case Isa::Avx512:
    case Isa::Avx512Vnni:
    case Isa::Amx: return &kVecAvx512;
  }
  return nullptr;
}

const VecMathConfig& vec_math_config() {
  static const VecMathConfig& chosen = *vec_math_config_for(isa_limit());
  return chosen;
}

}  // namespace onebit
