// A whole text file read into memory, bounded: a prompt file a user names
// on the command line, and a model's side files and tokenizer.json, where a
// wrong path must fail with its name and a huge or endless input (a device,
// a pipe that never ends, a hostile folder) must not take the machine's
// memory.
#pragma once

#include <cstddef>
#include <string>

namespace onebit {

// The bytes of `path` ("-": standard input), as they are (no decoding).
// Throws onebit::Error naming `what` and the path when it cannot be opened
// or read (a directory, a missing file) or holds more than `max_bytes`.
std::string read_text_file(const std::string& path, size_t max_bytes, const std::string& what);

// How messages name `path`: quoted, or "- (standard input)" for "-".
std::string text_file_name(const std::string& path);

}  // namespace onebit
