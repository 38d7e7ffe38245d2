// The ai.onnx opsets 1bit implements: from 13 (the opset torch.onnx and
// Optimum wrote for most published language models: axes as inputs) up to
// the newest opset the pinned onnx package (requirements.txt: onnx 1.22)
// defines. Ops register
// one entry per schema version in that span (graph/op_registry.h), so a
// node runs at the semantics of the opset its model imports.
#pragma once

#include <cstdint>

namespace onebit {

inline constexpr int64_t kOnnxOpsetMin = 13;
inline constexpr int64_t kOnnxOpsetMax = 27;  // onnx.defs.onnx_opset_version() of onnx 1.22

}  // namespace onebit
