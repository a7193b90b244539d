// An NVTX tool for tests: loaded by NVTX from NVTX_INJECTION64_PATH (as Nsight Systems' own is), it
// records the ranges ferry pushes and pops, by domain and name, and whether each thread's pushes and
// pops pair up. A test reads them through ferry_nvtx_recorded().
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <nvtx3/nvToolsExt.h>

namespace {

struct Domain {
  std::string name;
};

std::mutex g_mutex;
std::map<std::string, Domain*> g_domains;
std::map<std::string, unsigned long long> g_pushes;  // "domain/name" -> ranges pushed
std::map<std::thread::id, long long> g_depth;        // per thread: pushes minus pops
long long g_unbalanced = 0;                          // pops without a push

nvtxDomainHandle_t create_domain(const char* name) {
  std::lock_guard lock(g_mutex);
  Domain*& domain = g_domains[name];
  if (domain == nullptr) domain = new Domain{name};
  return reinterpret_cast<nvtxDomainHandle_t>(domain);
}

int push(nvtxDomainHandle_t handle, const nvtxEventAttributes_t* attributes) {
  const auto* domain = reinterpret_cast<const Domain*>(handle);
  std::string name = domain != nullptr ? domain->name : "";
  name += "/";
  if (attributes != nullptr && attributes->messageType == NVTX_MESSAGE_TYPE_ASCII) name += attributes->message.ascii;
  std::lock_guard lock(g_mutex);
  ++g_pushes[name];
  return static_cast<int>(++g_depth[std::this_thread::get_id()]);
}

int pop(nvtxDomainHandle_t) {
  std::lock_guard lock(g_mutex);
  long long& depth = g_depth[std::this_thread::get_id()];
  if (depth == 0) {
    ++g_unbalanced;
    return -1;
  }
  return static_cast<int>(--depth);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || table == nullptr ||
      size <= NVTX_CBID_CORE2_DomainCreateA) {
    return 0;
  }
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&create_domain);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}

// What was recorded, a line each: "<domain>/<name> <pushes>", then "open <ranges still open>" and
// "unbalanced <pops without a push>".
__attribute__((visibility("default"))) const char* ferry_nvtx_recorded() {
  static std::string text;
  std::lock_guard lock(g_mutex);
  text.clear();
  for (const auto& [name, count] : g_pushes) text += name + " " + std::to_string(count) + "\n";
  long long open = 0;
  for (const auto& [thread, depth] : g_depth) open += depth;
  text += "open " + std::to_string(open) + "\nunbalanced " + std::to_string(g_unbalanced) + "\n";
  return text.c_str();
}
}
