#include "api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace rdmajs::ibv {

namespace {

Api g_api;
const Api* g_loaded = nullptr;
std::string g_why;
std::once_flag g_once;

template <typename F>
bool bind(void* lib, F*& slot, const char* name, const char* version) {
  slot = reinterpret_cast<F*>(dlvsym(lib, name, version));
  if (slot) return true;
  g_why = std::string("libibverbs.so.1 lacks ") + name + "@" + version;
  return false;
}

void load_once() {
  // RDMAJS_LIBIBVERBS names another library file (packaging, or tests of a host without it).
  const char* name = std::getenv("RDMAJS_LIBIBVERBS");
  if (!name || !*name) name = "libibverbs.so.1";
  void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    g_why = std::string("cannot load ") + name + " (install rdma-core / libibverbs1): " + (e ? e : "");
    return;
  }
  const char* v = "IBVERBS_1.1";
  Api& a = g_api;
  bool ok = bind(lib, a.get_device_list, "ibv_get_device_list", v) &&
            bind(lib, a.free_device_list, "ibv_free_device_list", v) &&
            bind(lib, a.get_device_name, "ibv_get_device_name", v) &&
            bind(lib, a.get_device_guid, "ibv_get_device_guid", v) && bind(lib, a.open_device, "ibv_open_device", v) &&
            bind(lib, a.close_device, "ibv_close_device", v) && bind(lib, a.query_device, "ibv_query_device", v) &&
            bind(lib, a.query_port, "ibv_query_port", v) && bind(lib, a.query_gid, "ibv_query_gid", v) &&
            bind(lib, a.alloc_pd, "ibv_alloc_pd", v) && bind(lib, a.dealloc_pd, "ibv_dealloc_pd", v) &&
            bind(lib, a.reg_mr, "ibv_reg_mr", v) && bind(lib, a.dereg_mr, "ibv_dereg_mr", v) &&
            bind(lib, a.create_comp_channel, "ibv_create_comp_channel", "IBVERBS_1.0") &&
            bind(lib, a.destroy_comp_channel, "ibv_destroy_comp_channel", "IBVERBS_1.0") &&
            bind(lib, a.create_cq, "ibv_create_cq", v) && bind(lib, a.destroy_cq, "ibv_destroy_cq", v) &&
            bind(lib, a.get_cq_event, "ibv_get_cq_event", v) && bind(lib, a.ack_cq_events, "ibv_ack_cq_events", v) &&
            bind(lib, a.create_qp, "ibv_create_qp", v) && bind(lib, a.destroy_qp, "ibv_destroy_qp", v) &&
            bind(lib, a.modify_qp, "ibv_modify_qp", v) && bind(lib, a.query_qp, "ibv_query_qp", v) &&
            bind(lib, a.create_srq, "ibv_create_srq", v) && bind(lib, a.destroy_srq, "ibv_destroy_srq", v) &&
            bind(lib, a.modify_srq, "ibv_modify_srq", v) && bind(lib, a.get_async_event, "ibv_get_async_event", v) &&
            bind(lib, a.ack_async_event, "ibv_ack_async_event", v);
  if (!ok) return;  // the library stays loaded: unloading providers is not safe
  // No ibv_fork_init(): on kernels without fork-safe pinning it marks every registered
  // page MADV_DONTFORK, including heap pages that regMr buffers share with malloc data a
  // forked child needs before exec. allocMr regions are marked one by one instead.
  g_loaded = &g_api;
}

}  // namespace

const Api* load(std::string* why) {
  std::call_once(g_once, load_once);
  if (!g_loaded && why) *why = g_why;
  return g_loaded;
}

int query_port(const Api& api, ibv_context* ctx, uint8_t port, ibv_port_attr* out) {
  std::memset(out, 0, sizeof *out);
  verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx) return vctx->query_port(ctx, port, out, sizeof *out);
  return api.query_port(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(out));
}

}  // namespace rdmajs::ibv
