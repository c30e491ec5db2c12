// Opening an NCCL plugin library (net, tuner, env) as NCCL 2.28 names them: the setting as given, then, for a plain
// NAME (no '/', and not a lib*.so name), lib<kind>-NAME.so; an empty setting tries lib<kind>.so.
#pragma once

#include <string>

namespace chorus {

/// Opens the plugin library `setting` names for `prefix` ("libnccl-net", "libnccl-tuner", "libnccl-env"): null with
/// *tried listing what dlopen said for each name tried; otherwise *path is the file dlopen found.
void* openPluginLib(const char* prefix, const std::string& setting, std::string* path, std::string* tried);

}  // namespace chorus
