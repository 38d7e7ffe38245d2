// Every op file exposes one register function; register_all_ops calls them
// all, so the table is explicit (no static initialisers a linker may drop).
#pragma once

namespace onebit {

class OpRegistry;

void register_all_ops(OpRegistry& r);

void register_binary_ops(OpRegistry& r);
void register_shape_ops(OpRegistry& r);

}  // namespace onebit
