// NumPy .npy files (format 1.0-3.0, little-endian, C order), the exchange
// format of `1bit run` and the logit dumps.
#pragma once

#include <string>

#include "graph/tensor.h"

namespace onebit {

// Throws onebit::Error naming the file on any malformed header or size.
Tensor read_npy(const std::string& path);
void write_npy(const std::string& path, const Tensor& t);

}  // namespace onebit
