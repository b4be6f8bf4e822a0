// Who holds an inter-process lock, and what a waiter learns of it: whether it can still let
// go. A holder is known by (pid, start time): the pid alone names another process once it
// is reused after the holder died. Both live in one 64-bit lock word, so a waiter never
// reads a pid beside a start time that is not its own. Read from /proc/<pid>/stat, only once
// a wait has outlasted its budget (a syscall or three), never on the fast path.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace soft {

// RUNS: running, runnable (preempted), sleeping or in I/O: it gets back to its critical
// section. STOPPED: SIGSTOP, a job-control stop or a debugger's stop (state T or t): it
// does not until someone resumes it. DEAD: gone, or a zombie (state Z/X) not yet reaped.
enum class Holder { RUNS, STOPPED, DEAD };

// The lock word: the holder's start time (field 22 of /proc/<pid>/stat, clock ticks since
// boot, its low 32 bits: they repeat after 497 days at 100 Hz) above its pid. Never 0 (a
// pid is not), so 0 stays "free". kStartUnknown: /proc was unreadable when the holder
// looked at itself; such a holder is never declared dead by a start-time mismatch.
constexpr uint32_t kStartUnknown = 0xffffffffu;
inline uint64_t holder_word(uint32_t pid, uint32_t start) { return (uint64_t{start} << 32) | pid; }
inline uint32_t holder_pid(uint64_t word) { return static_cast<uint32_t>(word); }
inline uint32_t holder_start(uint64_t word) { return static_cast<uint32_t>(word >> 32); }

// One read of /proc/<pid>/stat: the state letter and the start time (low 32 bits).
// Returns 0, or the errno of the open or read that failed (ESRCH when it exited meanwhile).
inline int read_proc_stat(const char* path, char* state, uint32_t* start) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  char buf[512];  // pid, "(comm)" (at most 16 + 2 bytes), then 50 numbers: well within
  ssize_t n = read(fd, buf, sizeof buf - 1);
  int readErr = errno;
  close(fd);
  if (n <= 0) return n == 0 ? ESRCH : readErr;
  buf[n] = 0;
  // The fields follow the last ')': the command name may itself hold ')' and spaces.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return EPROTO;
  *state = p[2];
  // Field 3 is the state; field 22 the start time: 19 spaces further on.
  const char* q = p + 2;
  for (int field = 3; field < 22 && q != nullptr; field++) {
    q = std::strchr(q, ' ');
    if (q != nullptr) q++;
  }
  if (q == nullptr) return EPROTO;
  *start = static_cast<uint32_t>(std::strtoull(q, nullptr, 10));
  return 0;
}

// This process's lock word, read once per Device (a forked child builds its own Device).
// Whether this process's /proc is its own pid namespace's: /proc/self names getpid(). Not
// so without /proc, or under `unshare --pid --fork` without a /proc mounted for it: there
// /proc/<pid> is the parent namespace's process of that number, and a holder would read as
// dead (gone, or another start time) while it runs.
inline bool proc_is_ours() {
  char link[32];
  ssize_t n = readlink("/proc/self", link, sizeof link - 1);
  if (n <= 0) return false;
  link[n] = 0;
  return std::strtol(link, nullptr, 10) == static_cast<long>(getpid());
}

// This process's lock word, read once per Device (a forked child builds its own Device).
inline uint64_t self_holder(pid_t pid) {
  char state = 0;
  uint32_t start = 0;
  if (!proc_is_ours() || read_proc_stat("/proc/self/stat", &state, &start) != 0) start = kStartUnknown;
  return holder_word(static_cast<uint32_t>(pid), start);
}

// The state of the holder (its main thread: a stop stops every thread; a traced thread
// stops alone, so a holder traced in another thread reads as running and the waiter's hard
// cap bounds it). DEAD needs proof: the pid is gone from /proc, the process under it
// started at another time than the holder (the pid was reused), or it is a zombie. A holder
// can only be in this waiter's pid namespace: segments are attached only between processes
// of one pid and time namespace (PeerSegment checks proc_view()), so a missing pid is proof
// — if this /proc is that namespace's (proc_is_ours). Otherwise, or unreadable for another
// reason (EACCES, hidepid): RUNS, and the waiter's budget bounds the wait.
inline Holder holder_state(uint64_t word) {
  if (!proc_is_ours()) return Holder::RUNS;
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%u/stat", holder_pid(word));
  char state = 0;
  uint32_t start = 0;
  int err = read_proc_stat(path, &state, &start);
  if (err == ENOENT || err == ESRCH) return Holder::DEAD;
  if (err != 0) return Holder::RUNS;
  if (holder_start(word) != kStartUnknown && start != holder_start(word)) return Holder::DEAD;  // reused
  switch (state) {
    case 'T':
    case 't':
      return Holder::STOPPED;
    case 'Z':
    case 'X':
    case 'x':
      return Holder::DEAD;
    default:
      return Holder::RUNS;
  }
}

// How this process sees /proc: its pid namespace (pids) and time namespace (start times),
// as device and inode of /proc/self/ns/*; 0 for one it cannot read. Written in a segment's
// header by its owner; an attacher that sees /proc otherwise is refused, so every holder of
// a segment's locks reads the same pids and start times as every waiter.
inline uint64_t proc_view() {
  uint64_t view = 0;
  for (const char* ns : {"/proc/self/ns/pid", "/proc/self/ns/time"}) {
    struct stat st;
    if (stat(ns, &st) == 0) view = view * 0x9e3779b97f4a7c15ull + ((uint64_t{st.st_dev} << 32) ^ st.st_ino);
  }
  return view;
}

}  // namespace soft
