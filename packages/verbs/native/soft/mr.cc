// Memory regions: the MR table peers check keys against, and the pins that keep a region
// registered while a peer copies into it.

#include "engine.h"

namespace soft {

// A fresh random key and a free slot within its probe window; -1 when the table is full
// around every key tried. Keys are unique among live regions (and differ from the last one
// of the slot), so a stale key never names a new region.
bool Device::pickMrSlot(uint32_t* keyOut, uint32_t* slotOut) {
  const uint32_t slots = seg_.layout().mrSlots;
  for (int attempt = 0; attempt < 64; attempt++) {
    uint32_t key = static_cast<uint32_t>(mrKeys_());
    if (key == 0 || find_mr(seg_.base(), seg_.layout(), key) != UINT32_MAX) continue;
    uint32_t home = mr_home(key, slots);
    for (uint32_t i = 0; i < kMrProbes; i++) {
      uint32_t s = (home + i) % slots;
      if (s != 0 && mrSlotFree_[s]) {
        *keyOut = key;
        *slotOut = s;
        return true;
      }
    }
  }
  return false;
}

int Device::regMr(uint64_t addr, uint64_t length, uint32_t access, int memfd, uint32_t* keyOut) {
  uint32_t key = 0, slot = 0;
  if (!pickMrSlot(&key, &slot)) return -1;
  mrSlotFree_[slot] = false;
  MrEntry* e = mrEntry(slot);
  e->access = access;
  e->addr = addr;
  e->length = length;
  e->memfd = memfd;
  e->regionId = ++regionCounter_;
  e->key.store(key, std::memory_order_release);
  int h = nextHandle_++;
  mrs_[h] = Mr{slot, key, addr, length, access};
  *keyOut = key;
  return h;
}

bool Device::deregMr(int h, uint32_t* slotOut) {
  auto it = mrs_.find(h);
  if (it == mrs_.end()) return true;
  uint32_t slot = it->second.slot;
  mrs_.erase(it);
  if (slotOut) *slotOut = slot;
  if (revokeSlot(slot)) {
    mrSlotFree_[slot] = true;
    return true;
  }
  pinnedMrSlots_.push_back(slot);
  return false;
}

void Device::revokeMrs(std::vector<int>* stuck) {
  for (auto& [h, m] : mrs_) mrEntry(m.slot)->key.store(0, std::memory_order_seq_cst);
  for (auto& [h, m] : mrs_) {
    if (revokeSlot(m.slot)) {
      mrSlotFree_[m.slot] = true;
    } else {
      pinnedMrSlots_.push_back(m.slot);
      if (stuck) stuck->push_back(h);
    }
  }
  mrs_.clear();
}

void Device::drainMrSlots(std::vector<uint32_t>* freed) {
  for (size_t i = 0; i < pinnedMrSlots_.size();) {
    uint32_t slot = pinnedMrSlots_[i];
    if (mrEntry(slot)->pins.load(std::memory_order_seq_cst) == 0) {
      mrSlotFree_[slot] = true;
      freed->push_back(slot);
      pinnedMrSlots_[i] = pinnedMrSlots_.back();
      pinnedMrSlots_.pop_back();
    } else {
      i++;
    }
  }
}

Device::Quarantine Device::quarantine() const {
  Quarantine q{};
  q.mrSlots = static_cast<uint32_t>(pinnedMrSlots_.size());
  q.queueBlocks = static_cast<uint32_t>(quarantined_.size());
  q.qpSlots = static_cast<uint32_t>(drainingSlots_.size());
  return q;
}

bool Device::revokeSlot(uint32_t slot) {
  MrEntry* e = mrEntry(slot);
  e->key.store(0, std::memory_order_seq_cst);
  // A copy takes microseconds (a large one milliseconds); only a peer that died or was
  // stopped mid-copy holds a pin for long. The JS thread does not wait for it: past the
  // bound the slot and its memory are quarantined (drainMrSlots gives them back once the
  // pins drain), so neither a late copy nor a late pin release reaches a new MR.
  const int64_t deadline = mono_ns() + kLockWaitNs;
  for (uint32_t spins = 0; e->pins.load(std::memory_order_seq_cst) != 0; spins++) {
    if (spins > 64) {
      if (mono_ns() > deadline) return false;
      sched_yield();
    }
  }
  return true;
}

}  // namespace soft
