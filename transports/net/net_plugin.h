// External NCCL net plugins, inside chorus: the loader (net_plugin.cc, behind pluginNet() of transports/net/net.h)
// and the adapters that present a v6-v10 plugin as a v11 table (net_plugin_adapt.cc). docs/net_plugin.md says what
// each adapter changes.
#pragma once

#include <string>

#include "chorus/net.h"

namespace chorus {

/// Oldest ncclNetPlugin_vN version chorus loads (NCCL 2.28's range is v6 to v11).
constexpr int kNetPluginOldest = 6;
/// Newest ncclNetPlugin_vN version chorus loads (its own ABI, include/chorus/net.h).
constexpr int kNetPluginNewest = 11;

/// The table a library exports as ncclNetPlugin_v<version> (6-11), as a v11 table: a v11 table as it is, an older one
/// wrapped by an adapter that lives for the rest of the process (adapting the same table again returns the same
/// adapter). Null, with *why, when the version is unknown, an entry chorus calls is missing, or every adapter slot of
/// that version is taken by other libraries. `libName` names the library in *why.
const ncclNet_v11_t* adaptNetPlugin(const void* table, int version, const std::string& libName, std::string* why);

/// Opens one library as one entry of NCCL_NET_PLUGIN would be (a path, a library name, or NAME for
/// libnccl-net-NAME.so) and adapts the newest ncclNetPlugin_vN it exports, without the process cache of pluginNet():
/// for tests. On success *why says what was loaded; on failure it says why not, and the library is closed again.
const ncclNet_v11_t* loadNetPluginForTest(const char* path, std::string* why, int* version);

}  // namespace chorus
