#include "core/files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace chorus {

bool readFileText(const std::string& path, std::string* text, std::string* err) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *err = path + ": " + std::strerror(errno);
    return false;
  }
  std::stringstream s;
  s << f.rdbuf();
  *text = s.str();
  return true;
}

}  // namespace chorus
