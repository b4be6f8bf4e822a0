#include "discovery.h"

#include <endian.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

namespace rdmajs::ibv {

std::string gid_text(const ibv_gid& g) {
  char buf[48];
  const uint8_t* r = g.raw;
  std::snprintf(buf, sizeof buf, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", r[0], r[1],
                r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]);
  return buf;
}

std::string guid_text(uint64_t guidBe) {
  uint64_t g = be64toh(guidBe);
  char buf[24];
  std::snprintf(buf, sizeof buf, "%04x:%04x:%04x:%04x", static_cast<unsigned>(g >> 48) & 0xffff,
                static_cast<unsigned>(g >> 32) & 0xffff, static_cast<unsigned>(g >> 16) & 0xffff,
                static_cast<unsigned>(g) & 0xffff);
  return buf;
}

namespace {

std::string gid_type(const std::string& dev, int port, int index) {
  std::ifstream f("/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port) + "/gid_attrs/types/" +
                  std::to_string(index));
  std::string line;
  if (!f || !std::getline(f, line)) return "";
  return line;
}

bool is_zero(const ibv_gid& g) {
  for (uint8_t b : g.raw)
    if (b) return false;
  return true;
}

bool is_ipv4_mapped(const ibv_gid& g) {
  for (int i = 0; i < 10; i++)
    if (g.raw[i]) return false;
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

// Largest inline size a QP can be created with (devices do not report it).
uint32_t probe_inline(const Api& api, ibv_context* ctx) {
  ibv_pd* pd = api.alloc_pd(ctx);
  if (!pd) return 0;
  ibv_cq* cq = api.create_cq(ctx, 1, nullptr, nullptr, 0);
  uint32_t best = 0;
  if (cq) {
    for (uint32_t want : {1024u, 512u, 256u, 128u, 64u}) {
      ibv_qp_init_attr a{};
      a.send_cq = cq;
      a.recv_cq = cq;
      a.qp_type = IBV_QPT_RC;
      a.cap.max_send_wr = 1;
      a.cap.max_recv_wr = 1;
      a.cap.max_send_sge = 1;
      a.cap.max_recv_sge = 1;
      a.cap.max_inline_data = want;
      ibv_qp* qp = api.create_qp(pd, &a);
      if (!qp) continue;
      best = a.cap.max_inline_data;
      api.destroy_qp(qp);
      break;
    }
    api.destroy_cq(cq);
  }
  api.dealloc_pd(pd);
  return best;
}

// The probe creates a PD, a CQ and QPs: done once per device and process, not at every
// ibvStatus() / openDevice() (a device's limits do not change while it exists).
uint32_t cached_inline(const Api& api, ibv_context* ctx, const std::string& name) {
  static std::mutex mu;  // worker threads describe devices too
  static std::map<std::string, uint32_t> probed;
  std::lock_guard<std::mutex> lock(mu);
  auto it = probed.find(name);
  if (it != probed.end()) return it->second;
  uint32_t n = probe_inline(api, ctx);
  probed[name] = n;
  return n;
}

}  // namespace

bool describe(const Api& api, ibv_context* ctx, const std::string& name, uint64_t guidBe, DeviceView* out,
              std::string* why) {
  out->name = name;
  out->guid = guid_text(guidBe);
  if (int rc = api.query_device(ctx, &out->attr)) {
    *why = "ibv_query_device failed: " + std::string(std::strerror(rc));
    return false;
  }
  for (int p = 1; p <= out->attr.phys_port_cnt; p++) {
    PortView pv{};
    pv.port = p;
    if (query_port(api, ctx, static_cast<uint8_t>(p), &pv.attr)) continue;
    for (int i = 0; i < pv.attr.gid_tbl_len; i++) {
      GidEntry e{};
      e.index = i;
      if (api.query_gid(ctx, static_cast<uint8_t>(p), i, &e.gid) || is_zero(e.gid)) continue;
      e.text = gid_text(e.gid);
      e.type = gid_type(name, p, i);
      pv.gids.push_back(e);
    }
    out->ports.push_back(pv);
  }
  out->maxInline = cached_inline(api, ctx, name);
  return true;
}

bool choose_route(const DeviceView& dev, Route* out, std::string* why, int wantPort, int wantGid) {
  const PortView* port = nullptr;
  for (const auto& p : dev.ports) {
    if (wantPort > 0 ? p.port == wantPort : p.attr.state == IBV_PORT_ACTIVE) {
      port = &p;
      break;
    }
  }
  if (!port) {
    *why = wantPort > 0 ? "device " + dev.name + " has no port " + std::to_string(wantPort)
                        : "device " + dev.name + " has no ACTIVE port";
    return false;
  }
  out->port = port->port;
  out->lid = port->attr.lid;
  out->mtu = port->attr.active_mtu;
  out->ethernet = port->attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  out->gidIndex = -1;
  std::memset(&out->gid, 0, sizeof out->gid);
  const GidEntry* pick = nullptr;
  if (wantGid >= 0) {
    for (const auto& g : port->gids)
      if (g.index == wantGid) pick = &g;
    if (!pick) {
      *why =
          "port " + std::to_string(port->port) + " of " + dev.name + " has no GID at index " + std::to_string(wantGid);
      return false;
    }
  } else if (const char* forced = std::getenv("RDMAJS_IBV_GID_INDEX")) {
    int want = std::atoi(forced);
    for (const auto& g : port->gids)
      if (g.index == want) pick = &g;
    if (!pick) {
      *why = "RDMAJS_IBV_GID_INDEX=" + std::string(forced) + " is not a valid GID of " + dev.name;
      return false;
    }
  } else if (out->ethernet) {
    for (const auto& g : port->gids)
      if (!pick && g.type == "RoCE v2" && is_ipv4_mapped(g.gid)) pick = &g;
    for (const auto& g : port->gids)
      if (!pick && g.type == "RoCE v2") pick = &g;
    if (!pick && !port->gids.empty()) pick = &port->gids.front();
    if (!pick) {
      *why = "port " + std::to_string(port->port) + " of " + dev.name + " has no GID (RoCE needs one)";
      return false;
    }
  }
  if (pick) {
    out->gidIndex = pick->index;
    out->gid = pick->gid;
  }
  return true;
}

}  // namespace rdmajs::ibv
