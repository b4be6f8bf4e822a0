// What a waiter for an inter-process lock learns of the process whose pid the lock word
// holds: whether it can still let go. Read from /proc/<pid>/stat, only once a wait has
// outlasted its budget (a syscall or three), never on the fast path.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace soft {

// RUNS: running, runnable (preempted), sleeping or in I/O: it gets back to its critical
// section. STOPPED: SIGSTOP, a job-control stop or a debugger's stop (state T or t): it
// does not until someone resumes it. DEAD: gone, or a zombie (state Z/X) not yet reaped.
enum class Holder { RUNS, STOPPED, DEAD };

// The state of the process (its main thread: a stop stops every thread; a traced thread
// stops alone, so a holder traced in another thread reads as running and the waiter's hard
// cap bounds it). Unreadable for another reason (EACCES, hidepid): RUNS, for the same cap.
inline Holder holder_state(pid_t pid) {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH ? Holder::DEAD : Holder::RUNS;
  char buf[256];  // pid, "(comm)" (at most 16 + 2 bytes), then the state: well within
  ssize_t n = read(fd, buf, sizeof buf - 1);
  int readErr = errno;
  close(fd);
  if (n <= 0) return n == 0 || readErr == ESRCH ? Holder::DEAD : Holder::RUNS;  // exited since open
  buf[n] = 0;
  // The state follows the last ')': the command name may itself hold ')' and spaces.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return Holder::RUNS;
  switch (p[2]) {
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

}  // namespace soft
