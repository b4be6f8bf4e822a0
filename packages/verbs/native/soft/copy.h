// Moving payload between this process and a peer's registered memory: memcpy when the
// peer is this very process (another device or a worker), cross-memory attach
// (process_vm_readv/writev, one system call per operation) otherwise.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>

namespace soft {

// Copies the bytes described by `local` into `remote` (write) or `remote` into `local`
// (read). Both lists describe the same total length. COPY_FAULT: an address the peer does
// not map (its fault); COPY_UNREACHABLE: the kernel refuses cross-memory attach to it
// (EPERM: ptrace access check, e.g. Yama; ESRCH: gone), which is no fault of the peer's
// memory and is retried like an unreachable responder.
enum CopyResult { COPY_OK, COPY_FAULT, COPY_UNREACHABLE };
CopyResult copy_to_peer(pid_t peer, const iovec* local, size_t nl, const iovec* remote, size_t nr);
CopyResult copy_from_peer(pid_t peer, const iovec* local, size_t nl, const iovec* remote, size_t nr);
// memcpy from one gather list into one scatter list of the same total length.
void scatter_copy(const iovec* dst, size_t nd, const iovec* src, size_t ns);
// The same into one contiguous destination, its last byte stored last (after a release
// fence): a reader polling the last byte of an RDMA WRITE then sees the whole message,
// as with the in-order placement of RC hardware.
void ordered_copy(const iovec& dst, const iovec* src, size_t ns);

}  // namespace soft
