// libibverbs, loaded at run time with dlopen and versioned symbols: the addon loads (and the
// soft provider works) on hosts without rdma-core. Data-path verbs (post, poll, notify) are
// inline functions of verbs.h that call through the context's ops, so they need no symbol.
#pragma once
#include <infiniband/verbs.h>

#include <string>

namespace rdmajs::ibv {

struct Api {
  ibv_device** (*get_device_list)(int*);
  void (*free_device_list)(ibv_device**);
  const char* (*get_device_name)(ibv_device*);
  __be64 (*get_device_guid)(ibv_device*);
  ibv_context* (*open_device)(ibv_device*);
  int (*close_device)(ibv_context*);
  int (*query_device)(ibv_context*, ibv_device_attr*);
  int (*query_port)(ibv_context*, uint8_t, _compat_ibv_port_attr*);
  int (*query_gid)(ibv_context*, uint8_t, int, ibv_gid*);
  ibv_pd* (*alloc_pd)(ibv_context*);
  int (*dealloc_pd)(ibv_pd*);
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int);
  int (*dereg_mr)(ibv_mr*);
  ibv_comp_channel* (*create_comp_channel)(ibv_context*);
  int (*destroy_comp_channel)(ibv_comp_channel*);
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int);
  int (*destroy_cq)(ibv_cq*);
  int (*get_cq_event)(ibv_comp_channel*, ibv_cq**, void**);
  void (*ack_cq_events)(ibv_cq*, unsigned int);
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*);
  int (*destroy_qp)(ibv_qp*);
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int);
  int (*query_qp)(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*);
  ibv_srq* (*create_srq)(ibv_pd*, ibv_srq_init_attr*);
  int (*destroy_srq)(ibv_srq*);
  int (*modify_srq)(ibv_srq*, ibv_srq_attr*, int);
  int (*get_async_event)(ibv_context*, ibv_async_event*);
  void (*ack_async_event)(ibv_async_event*);
};

// The loaded library, or nullptr with the reason in `why` (no libibverbs.so.1, or a symbol
// of the needed version missing). Loads once per process.
const Api* load(std::string* why);

// Port attributes as the verbs.h inline does it: the extended op when the provider has one.
int query_port(const Api& api, ibv_context* ctx, uint8_t port, ibv_port_attr* out);

}  // namespace rdmajs::ibv
