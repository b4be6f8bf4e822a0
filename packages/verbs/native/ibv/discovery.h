// What ibv_devinfo shows: devices, ports, GID tables and limits; and which GID a QP should use.
#pragma once
#include <string>
#include <vector>

#include "api.h"

namespace rdmajs::ibv {

struct GidEntry {
  int index;
  ibv_gid gid;
  std::string text;  // fe80:0000:...
  std::string type;  // "RoCE v2", "IB/RoCE v1", or "" when sysfs does not say
};

struct PortView {
  int port;
  ibv_port_attr attr;
  std::vector<GidEntry> gids;  // non-zero entries only
};

struct DeviceView {
  std::string name;
  std::string guid;
  ibv_device_attr attr;
  std::vector<PortView> ports;
  uint32_t maxInline;  // probed: the device attributes do not carry it
};

// Queries an opened context (ports 1..phys_port_cnt).
bool describe(const Api& api, ibv_context* ctx, const std::string& name, uint64_t guidBe, DeviceView* out,
              std::string* why);

// The port and GID index a QP uses: the first ACTIVE port; on Ethernet the RoCE v2 GID of an
// IPv4 address if there is one (what rdma_cm picks by default), else RoCE v2, else the first.
// RDMAJS_IBV_GID_INDEX overrides the index. A QP may ask for a port (`wantPort` > 0) and a
// GID index (`wantGid` >= 0) of its own.
struct Route {
  int port;
  int gidIndex;  // -1 on InfiniBand without a GRH
  ibv_gid gid;
  uint16_t lid;
  ibv_mtu mtu;
  bool ethernet;
};
bool choose_route(const DeviceView& dev, Route* out, std::string* why, int wantPort = 0, int wantGid = -1);

std::string gid_text(const ibv_gid& g);
std::string guid_text(uint64_t guidBe);

}  // namespace rdmajs::ibv
