// Fusion passes. Each is a pure matcher (never mutates) plus a rewriter, in a
// file of its own with the pattern drawn in its comment.
#pragma once

#include "graph/passes.h"

namespace onebit {

void fuse_matmul_transpose(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);
void fuse_qdq_matmul(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);
void fuse_w4_matmul(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);
void fuse_rms_norm(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);
void fuse_rotary(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);
void fuse_gqa_matmul(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);
void int8_dynamic_matmul(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);

}  // namespace onebit
