// ibvStatus(): what the ibverbs provider can offer on this host (devices, ports, GIDs,
// limits), and the provider's exports.
#include <cstring>
#include <string>

#include "device.h"

namespace rdmajs {
namespace {

Napi::Object DescribeDevice(Napi::Env env, const ibv::DeviceView& d) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", d.name);
  o.Set("guid", d.guid);
  Napi::Array ports = Napi::Array::New(env, d.ports.size());
  for (size_t i = 0; i < d.ports.size(); i++) {
    const auto& p = d.ports[i];
    Napi::Object po = Napi::Object::New(env);
    po.Set("port", p.port);
    po.Set("state", static_cast<int>(p.attr.state));
    po.Set("activeMtu", static_cast<int>(p.attr.active_mtu));
    po.Set("linkLayer", p.attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
    po.Set("lid", p.attr.lid);
    po.Set("maxMsgSize", static_cast<double>(p.attr.max_msg_sz));
    Napi::Array gids = Napi::Array::New(env, p.gids.size());
    for (size_t g = 0; g < p.gids.size(); g++) {
      Napi::Object go = Napi::Object::New(env);
      go.Set("index", p.gids[g].index);
      go.Set("gid", p.gids[g].text);
      go.Set("type", p.gids[g].type);
      gids.Set(static_cast<uint32_t>(g), go);
    }
    po.Set("gids", gids);
    ports.Set(static_cast<uint32_t>(i), po);
  }
  o.Set("ports", ports);
  const ibv_device_attr& a = d.attr;
  Napi::Object l = Napi::Object::New(env);
  l.Set("maxQp", a.max_qp);
  l.Set("maxQpWr", a.max_qp_wr);
  l.Set("maxSge", a.max_sge);
  l.Set("maxCq", a.max_cq);
  l.Set("maxCqe", a.max_cqe);
  l.Set("maxMr", a.max_mr);
  l.Set("maxMrSize", Napi::BigInt::New(env, static_cast<uint64_t>(a.max_mr_size)));  // 64-bit: exact
  l.Set("maxInlineData", d.maxInline);
  l.Set("maxSrq", a.max_srq);
  l.Set("maxSrqWr", a.max_srq_wr);
  l.Set("maxQpRdAtom", a.max_qp_rd_atom);
  o.Set("limits", l);
  return o;
}

// { available, reason?, devices: [...] }: what the ibverbs provider can offer here.
Napi::Value IbvStatus(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("compiled", true);
  Napi::Array devices = Napi::Array::New(env);
  o.Set("devices", devices);
  std::string why;
  const Api* api = ibv::load(&why);
  if (!api) {
    o.Set("reason", why);
    return o;
  }
  int n = 0;
  ibv_device** list = api->get_device_list(&n);
  if (!list) {
    o.Set("reason", std::string("ibv_get_device_list: ") + std::strerror(errno));
    return o;
  }
  uint32_t k = 0;
  for (int i = 0; i < n; i++) {
    std::string name = api->get_device_name(list[i]);
    ibv_context* ctx = api->open_device(list[i]);
    if (!ctx) {
      why = "ibv_open_device(" + name + "): " + std::strerror(errno);
      continue;
    }
    ibv::DeviceView view;
    if (ibv::describe(*api, ctx, name, api->get_device_guid(list[i]), &view, &why))
      devices.Set(k++, DescribeDevice(env, view));
    api->close_device(ctx);
  }
  api->free_device_list(list);
  if (k == 0) o.Set("reason", n == 0 ? std::string("libibverbs found no RDMA device") : why);
  return o;
}

}  // namespace

void register_ibverbs(Napi::Env env, Napi::Object exports) {
  exports.Set("IbvDevice", IbvDevice::Define(env));
  exports.Set("ibvStatus", Napi::Function::New(env, IbvStatus));
}

}  // namespace rdmajs
