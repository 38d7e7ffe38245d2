// Open-addressing hash tables for the BPE hot paths: token -> id and
// (left id, right id) -> merge. A vocabulary of 150k tokens in node-based
// std::unordered_maps costs several cache misses per lookup; these cost about
// one. Both are built once and only read afterwards.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace onebit {

inline size_t table_capacity(size_t entries) {
  size_t capacity = 16;
  while (capacity < entries * 2) capacity *= 2;  // load factor <= 1/2
  return capacity;
}

// Token string -> id. The strings live in the caller's id -> token table.
class TokenIndex {
 public:
  // Indexes every tokens[id] with present[id]. Returns -1, or the id of a
  // string that is listed under two ids (the index then keeps the larger).
  int32_t build(const std::vector<std::string>& tokens, const std::vector<uint8_t>& present) {
    int32_t duplicate = -1;
    size_t n = 0;
    for (const uint8_t p : present) n += p;
    slots_.assign(table_capacity(n), Slot{0, -1});
    mask_ = slots_.size() - 1;
    for (size_t id = 0; id < tokens.size(); ++id) {
      if (!present[id]) continue;
      const uint64_t h = hash(tokens[id]);
      size_t i = h & mask_;
      while (slots_[i].id >= 0 && !(slots_[i].hash == uint32_t(h) && tokens[slots_[i].id] == tokens[id])) {
        i = (i + 1) & mask_;
      }
      if (slots_[i].id >= 0) duplicate = slots_[i].id;
      slots_[i] = Slot{uint32_t(h), int32_t(id)};
    }
    return duplicate;
  }

  int32_t find(std::string_view token, const std::vector<std::string>& tokens) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(token);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == uint32_t(h) && tokens[s.id] == token) return s.id;
    }
  }

 private:
  struct Slot {
    uint32_t hash;  // low bits of the full hash, to skip most string compares
    int32_t id;     // -1: empty
  };
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// (left id, right id) -> merge rank and merged id.
class MergeTable {
 public:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };

  void reserve(size_t entries) {
    slots_.assign(table_capacity(entries), Slot{kEmpty, {0, -1}});
    mask_ = slots_.size() - 1;
  }

  // A pair inserted twice keeps the later merge.
  void insert(int32_t left, int32_t right, Merge merge) {
    const uint64_t key = pack(left, right);
    size_t i = slot_for(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    slots_[i] = Slot{key, merge};
  }

  const Merge* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = slot_for(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);  // ids are non-negative int32, so no pair packs to this
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static uint64_t pack(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }
  // Fibonacci hashing spreads the packed ids over the table.
  size_t slot_for(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

}  // namespace onebit
