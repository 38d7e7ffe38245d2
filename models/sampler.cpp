#include "models/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

using Candidate = Sampler::Candidate;

// The candidates' order: larger logit first, the lower id on ties (as argmax
// and torch.topk on distinct values).
bool better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// A weight's bucket for top-p's radix selection: its top 11 bits (sign 0,
// exponent, 3 mantissa bits); positive floats order as their bits.
uint32_t weight_bucket(float w) {
  uint32_t bits;
  std::memcpy(&bits, &w, sizeof bits);
  return (bits >> 20) & 0x7ff;  // a NaN weight with its sign set stays in range
}

}  // namespace

void SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0)
    fail("--temperature {}: must be 0 (the largest logit) or positive", temperature);
  if (top_k < 0) fail("--top-k {}: must be 0 (off) or positive", top_k);
  if (!(top_p > 0 && top_p <= 1)) fail("--top-p {}: must be in (0, 1] (1: off)", top_p);
  if (!(min_p >= 0 && min_p <= 1)) fail("--min-p {}: must be in [0, 1] (0: off)", min_p);
  if (!std::isfinite(repeat_penalty) || repeat_penalty <= 0)
    fail("--repeat-penalty {}: must be positive (1: off)", repeat_penalty);
  if (repeat_last_n < -1) fail("--repeat-last-n {}: must be -1 (the whole history), 0 (off) or positive", repeat_last_n);
}

std::string SamplingParams::describe() const {
  std::string s = fmt::format("temperature {}", temperature);
  if (top_k > 0) s += fmt::format(", top-k {}", top_k);
  if (top_p < 1) s += fmt::format(", top-p {}", top_p);
  if (min_p > 0) s += fmt::format(", min-p {}", min_p);
  if (repeat_penalty != 1 && repeat_last_n != 0)
    s += repeat_last_n < 0 ? fmt::format(", repeat penalty {} over the whole history", repeat_penalty)
                           : fmt::format(", repeat penalty {} over the last {}", repeat_penalty, repeat_last_n);
  return s + fmt::format(", seed {}", seed);
}

Xoshiro256::Xoshiro256(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = splitmix64(x);
}

uint64_t Xoshiro256::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { params_.validate(); }

void Sampler::penalise(const float* logits, int64_t vocab, std::span<const int32_t> history) {
  penalised_.clear();
  const int64_t n = params_.repeat_last_n;
  if (params_.repeat_penalty == 1 || n == 0) return;
  const size_t window = n < 0 ? history.size() : std::min(history.size(), static_cast<size_t>(n));
  for (int32_t id : history.subspan(history.size() - window))
    if (id >= 0 && id < vocab) penalised_.push_back({id, 0.f});
  std::sort(penalised_.begin(), penalised_.end());
  penalised_.erase(std::unique(penalised_.begin(), penalised_.end(),
                               [](const auto& a, const auto& b) { return a.first == b.first; }),
                   penalised_.end());
  const float penalty = params_.repeat_penalty;
  for (auto& [id, l] : penalised_) {
    l = logits[id];
    l = l < 0 ? l * penalty : l / penalty;
  }
}

void Sampler::top_k(const float* logits, int64_t vocab, int64_t k) {
  // The k best in one pass: a heap whose front is the worst kept. While
  // scanning in increasing id a tie with the front loses (the front has the
  // lower id), so almost every logit costs one comparison with `worst`.
  cand_.clear();
  float worst = -INFINITY;
  const auto offer = [&](int32_t id, float l) {
    const Candidate c{id, l, 0.f};
    if (cand_.size() < static_cast<size_t>(k)) {
      cand_.push_back(c);
      std::push_heap(cand_.begin(), cand_.end(), better);
    } else if (better(c, cand_.front())) {
      std::pop_heap(cand_.begin(), cand_.end(), better);
      cand_.back() = c;
      std::push_heap(cand_.begin(), cand_.end(), better);
    } else {
      return;
    }
    if (cand_.size() == static_cast<size_t>(k)) worst = cand_.front().logit;
  };
  // The logits between penalised ids as they are, then the penalised ones.
  int64_t from = 0;
  for (size_t p = 0; p <= penalised_.size(); ++p) {
    const int64_t to = p < penalised_.size() ? penalised_[p].first : vocab;
    for (int64_t i = from; i < to; ++i)
      if (logits[i] > worst || cand_.size() < static_cast<size_t>(k)) offer(static_cast<int32_t>(i), logits[i]);
    from = to + 1;
  }
  for (const auto& [id, l] : penalised_) offer(id, l);
}

namespace {

// Σ w in double, in eight interleaved partial sums (the order is fixed, so
// the result is too).
double sum(const float* w, size_t n) {
  double acc[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t j = 0; j < 8; ++j) acc[j] += w[i + j];
  for (size_t j = 0; i < n; ++i, ++j) acc[j] += w[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

constexpr size_t kBlock = 256;  // the draw over the whole vocabulary walks block sums first

}  // namespace

int32_t Sampler::choose(const float* logits, int64_t vocab, std::span<const int32_t> history, double u) {
  if (vocab < 1) fail("sampling from {} logits", vocab);
  penalise(logits, vocab, history);
  all_ = false;
  if (params_.temperature == 0) {
    top_k(logits, vocab, 1);
    cand_[0].weight = 1;
    kept_ = 1;
    return cand_[0].id;
  }
  const float inv_t = 1.0f / params_.temperature;
  const bool use_top_k = params_.top_k > 0 && params_.top_k < vocab;
  double total = 0;
  if (use_top_k) {
    top_k(logits, vocab, params_.top_k);
    float max_logit = -INFINITY;
    for (const Candidate& c : cand_) max_logit = std::max(max_logit, c.logit);
    scratch_.resize(cand_.size());
    for (size_t i = 0; i < cand_.size(); ++i) scratch_[i] = (cand_[i].logit - max_logit) * inv_t;
    vec_math_config().exp(scratch_.size(), scratch_.data(), scratch_.data());
    for (size_t i = 0; i < cand_.size(); ++i) cand_[i].weight = scratch_[i];
    total = sum(scratch_.data(), scratch_.size());
  } else {
    // The one copy of the vocabulary: weights by id.
    const size_t n = static_cast<size_t>(vocab);
    scratch_.assign(logits, logits + n);
    for (const auto& [id, l] : penalised_) scratch_[static_cast<size_t>(id)] = l;
    const float max_logit = *std::max_element(scratch_.begin(), scratch_.end());
    for (float& x : scratch_) x = (x - max_logit) * inv_t;
    vec_math_config().exp(n, scratch_.data(), scratch_.data());
    blocks_.resize((n + kBlock - 1) / kBlock);
    for (size_t b = 0; b < blocks_.size(); ++b) {
      blocks_[b] = sum(scratch_.data() + b * kBlock, std::min(kBlock, n - b * kBlock));
      total += blocks_[b];
    }
    if (params_.min_p == 0 && params_.top_p == 1) {
      // Every token stays: draw over the weights by id, a block at a time.
      all_ = true;
      kept_ = 0;
      const double point = u * total;
      double cum = 0;
      size_t b = 0;
      while (b + 1 < blocks_.size() && cum + blocks_[b] <= point) cum += blocks_[b++];
      const size_t end = std::min(n, (b + 1) * kBlock);
      for (size_t i = b * kBlock; i < end; ++i) {
        cum += scratch_[i];
        if (cum > point) return static_cast<int32_t>(i);
      }
      return static_cast<int32_t>(end - 1);
    }
    // Candidates, in id order: for min-p the tokens whose weight reaches
    // it; for top-p alone those at or above the bucket of weights (by their
    // top bits, as top_p_filter buckets them) where the mass counted from
    // the largest reaches p, so that the nucleus is among them.
    cand_.clear();
    if (params_.min_p > 0) {
      for (size_t i = 0; i < n; ++i)
        if (scratch_[i] >= params_.min_p) cand_.push_back({static_cast<int32_t>(i), logits[i], scratch_[i]});
    } else {
      const double target = static_cast<double>(params_.top_p) * total;
      bucket_mass_.assign(0x800, 0.0);
      for (size_t i = 0; i < n; ++i) bucket_mass_[weight_bucket(scratch_[i])] += scratch_[i];
      uint32_t b = 0x7ff;
      for (double mass = 0; b > 0 && mass + bucket_mass_[b] < target;) mass += bucket_mass_[b--];
      for (size_t i = 0; i < n; ++i)
        if (weight_bucket(scratch_[i]) >= b) cand_.push_back({static_cast<int32_t>(i), logits[i], scratch_[i]});
    }
    // The logits the candidates report: both lists are in id order.
    size_t c = 0;
    for (const auto& [id, l] : penalised_) {
      while (c < cand_.size() && cand_[c].id < id) ++c;
      if (c < cand_.size() && cand_[c].id == id) cand_[c].logit = l;
    }
  }

  // min-p: the tokens whose weight reaches min_p (the largest is 1), in place
  // and in order (already so when the candidates came by that threshold).
  bool by_id = !use_top_k;
  size_t m = cand_.size();
  if (params_.min_p > 0) {
    const float threshold = params_.min_p;
    m = 0;
    for (size_t i = 0; i < cand_.size(); ++i)
      if (cand_[i].weight >= threshold) cand_[m++] = cand_[i];
  }
  // top-p over the mass of every token (after top-k, before min-p): the
  // tokens in decreasing logit up to the first whose preceding mass reaches
  // p. The min-p tokens are a prefix of that order, so it needs only them.
  if (params_.top_p < 1 && m > 1) {
    m = top_p_filter(m, static_cast<double>(params_.top_p) * total);
  }

  // The draw: the kept tokens in increasing id.
  kept_ = m;
  if (!by_id)
    std::sort(cand_.begin(), cand_.begin() + m, [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  double kept_mass = 0;
  for (size_t i = 0; i < m; ++i) kept_mass += cand_[i].weight;
  const double point = u * kept_mass;
  double cum = 0;
  for (size_t i = 0; i < m; ++i) {
    cum += cand_[i].weight;
    if (cum > point) return cand_[i].id;
  }
  return cand_[m - 1].id;
}

// Radix selection on the weights: positive floats order as their bits, and
// a larger weight has a larger logit, so bucketing by the top bits orders
// the candidates as `better` does between buckets. A histogram of mass per
// bucket, walked from the top, finds the bucket where the mass reaches the
// target; everything above it is kept, everything below dropped, and only
// that bucket is refined (by the next bits), then sorted and walked. The
// selection runs on a copy; the kept set is then a predicate on the bucket
// keys and the last token kept, applied to cand_ in place, so its order
// (by id, when the candidates came so) is kept without sorting thousands of
// tokens twice.
size_t Sampler::top_p_filter(size_t m, double target) {
  static constexpr int kShift[2] = {20, 8};
  static constexpr uint32_t kMask[2] = {0x7ff, 0xfff};
  const auto key = [](const Candidate& c, int level) {
    uint32_t bits;
    std::memcpy(&bits, &c.weight, sizeof bits);
    return (bits >> kShift[level]) & kMask[level];
  };
  sel_.assign(cand_.begin(), cand_.begin() + static_cast<long>(m));
  auto first = sel_.begin();
  size_t lo = 0, hi = m;  // of sel_: [0, lo) kept, [lo, hi) undecided
  double mass = 0;        // of the kept
  uint32_t boundary[2] = {0, 0};
  int levels = 0;
  for (; levels < 2 && hi - lo > 64; ++levels) {
    const uint32_t mask = kMask[levels];
    bucket_mass_.assign(mask + 1, 0.0);
    for (size_t i = lo; i < hi; ++i) bucket_mass_[key(sel_[i], levels)] += sel_[i].weight;
    uint32_t b = mask;
    while (b > 0 && mass + bucket_mass_[b] < target) mass += bucket_mass_[b--];
    boundary[levels] = b;
    const int level = levels;
    const auto above = std::partition(first + static_cast<long>(lo), first + static_cast<long>(hi),
                                      [&](const Candidate& c) { return key(c, level) > b; });
    const auto at = std::partition(above, first + static_cast<long>(hi),
                                   [&](const Candidate& c) { return key(c, level) == b; });
    lo = static_cast<size_t>(above - first);
    hi = static_cast<size_t>(at - first);
  }
  std::sort(first + static_cast<long>(lo), first + static_cast<long>(hi), better);
  size_t i = lo;
  while (i < hi && mass < target) mass += sel_[i++].weight;
  const bool has_last = i > lo;
  const Candidate last = has_last ? sel_[i - 1] : Candidate{};
  const auto keep = [&](const Candidate& c) {
    for (int l = 0; l < levels; ++l) {
      const uint32_t k = key(c, l);
      if (k != boundary[l]) return k > boundary[l];
    }
    return has_last && !better(last, c);  // `last` or before it
  };
  size_t out = 0;
  for (size_t j = 0; j < m; ++j)
    if (keep(cand_[j])) cand_[out++] = cand_[j];
  return out;
}

}  // namespace onebit
