// The operand of LDTILECFG (AMX), palette 1: each tile's rows and bytes a
// row. Plain data; the AMX kernel files and the tile-unit peak benchmark
// fill it and load it with _tile_loadconfig.
#pragma once

#include <cstdint>

namespace onebit {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes a row, tile t
  uint8_t rows[16] = {};    // rows, tile t
};
static_assert(sizeof(AmxTileConfig) == 64, "LDTILECFG reads 64 bytes");

}  // namespace onebit
