// Small file helpers shared by the parts of chorus that read files (topology files, the link-cost cache).
#pragma once

#include <string>

namespace chorus {

/// Reads the whole file at `path` into *text; false, with *err = "<path>: <errno's text>", when it cannot be read.
bool readFileText(const std::string& path, std::string* text, std::string* err);

}  // namespace chorus
