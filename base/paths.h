// Paths a model folder names (external data, the decoder a genai_config.json
// names, side files) are untrusted: they must stay inside the folder.
#pragma once

#include <string>

namespace onebit {

// The real path of `relative` inside `dir`: refused when `relative` is empty
// or absolute, has a '..' component, does not exist, or resolves (symlinks
// followed) outside `dir`. `what` names the path in the error ("external
// data location", "model.decoder.filename").
std::string resolve_inside(const std::string& dir, const std::string& relative, const std::string& what);

}  // namespace onebit
