// An LD_PRELOAD interposer that injects file-system faults into a process at
// chosen instants — a full disk, a read-only file system, a kill -9 in the middle
// of a write, a file replaced after its first open — so that tests/app/fault_test.sh
// can check what kiln does about each, on any machine and without privileges.
//
// KILN_FAULTS holds rules separated by ';', each OPS@PATH[#N]:ACTION[=ARG]:
//   OPS     operations, joined by ',': openw (an open that may write or create),
//           openr (an open for reading), write (write, pwrite, writev), fsync
//           (fsync, fdatasync), mkdir, rename, unlink (unlink, unlinkat, rmdir,
//           remove); or 'modify' for all but openr and fsync
//   PATH    a substring of the path (of either path of a rename; of the file a
//           descriptor was opened on for write and fsync)
//   #N      the first N matching operations pass untouched (default 0)
//   ACTION  fail=ERRNO   the operation fails with ENOSPC, EROFS, EACCES, EIO or EDQUOT
//           full=BYTES   writes succeed until BYTES bytes were written (in all), then
//                        write what fits and fail with ENOSPC, as a full disk does
//           kill         the operation is done, then the process gets SIGKILL
//           delay=US     the operation waits US microseconds first
//           swap=FILE    (openr) once opened, the file is replaced by FILE's bytes
//                        through a rename (a new inode; the open descriptor keeps
//                        the old bytes), once
//           overwrite=FILE  the same, written into the same inode (the descriptor
//                        sees the new bytes), once
// KILN_FAULT_TRACE=FILE appends "op path" for every operation on a path holding
// KILN_FAULT_TRACE_PATH (default "checkpoints"), after the operation: what the
// process had done when it was killed.
// Example: KILN_FAULTS='write@optimizer.pt#1:kill' LD_PRELOAD=libkiln_fault_inject.so kiln train …
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum Op { kOpenW = 1, kOpenR = 2, kWrite = 4, kFsync = 8, kMkdir = 16, kRename = 32, kUnlink = 64 };
enum Action { kFail, kFull, kKill, kDelay, kSwap, kOverwrite };

typedef struct {
  int ops;
  char path[PATH_MAX];
  long skip;    // matching operations that pass before the action applies
  long seen;    // matching operations so far
  int action;
  long arg;     // errno, bytes or microseconds
  char file[PATH_MAX];  // swap, overwrite: the replacement
  int done;     // swap, overwrite: once
} Rule;

static Rule g_rules[8];
static int g_nrules;
static long g_written;  // full: bytes written to matching files
static int g_trace_fd = -1;
static const char* g_trace_path = "checkpoints";

// The real functions, found once before main.
static int (*real_open)(const char*, int, ...);
static int (*real_open64)(const char*, int, ...);
static int (*real_openat)(int, const char*, int, ...);
static int (*real_openat64)(int, const char*, int, ...);
static int (*real_creat)(const char*, mode_t);
static FILE* (*real_fopen)(const char*, const char*);
static FILE* (*real_fopen64)(const char*, const char*);
static ssize_t (*real_write)(int, const void*, size_t);
static ssize_t (*real_pwrite)(int, const void*, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void*, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec*, int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_mkdir)(const char*, mode_t);
static int (*real_mkdirat)(int, const char*, mode_t);
static int (*real_rename)(const char*, const char*);
static int (*real_renameat)(int, const char*, int, const char*);
static int (*real_renameat2)(int, const char*, int, const char*, unsigned);
static int (*real_unlink)(const char*);
static int (*real_unlinkat)(int, const char*, int);
static int (*real_rmdir)(const char*);
static int (*real_remove)(const char*);

static int parse_errno(const char* name) {
  static const struct { const char* name; int value; } kErrnos[] = {
      {"ENOSPC", ENOSPC}, {"EROFS", EROFS}, {"EACCES", EACCES}, {"EIO", EIO}, {"EDQUOT", EDQUOT}};
  for (size_t i = 0; i < sizeof kErrnos / sizeof kErrnos[0]; ++i)
    if (!strcmp(name, kErrnos[i].name)) return kErrnos[i].value;
  fprintf(stderr, "fault_inject: unknown errno '%s'\n", name);
  abort();
}

static int parse_ops(char* list) {
  int ops = 0;
  for (char* save = NULL, *op = strtok_r(list, ",", &save); op; op = strtok_r(NULL, ",", &save)) {
    if (!strcmp(op, "openw")) ops |= kOpenW;
    else if (!strcmp(op, "openr")) ops |= kOpenR;
    else if (!strcmp(op, "write")) ops |= kWrite;
    else if (!strcmp(op, "fsync")) ops |= kFsync;
    else if (!strcmp(op, "mkdir")) ops |= kMkdir;
    else if (!strcmp(op, "rename")) ops |= kRename;
    else if (!strcmp(op, "unlink")) ops |= kUnlink;
    else if (!strcmp(op, "modify")) ops |= kOpenW | kWrite | kMkdir | kRename | kUnlink;
    else {
      fprintf(stderr, "fault_inject: unknown operation '%s'\n", op);
      abort();
    }
  }
  return ops;
}

// One rule: OPS@PATH[#N]:ACTION[=ARG].
static void parse_rule(char* text) {
  if (g_nrules == (int)(sizeof g_rules / sizeof g_rules[0])) abort();
  Rule* r = &g_rules[g_nrules++];
  memset(r, 0, sizeof *r);
  char* at = strchr(text, '@');
  char* colon = at ? strchr(at, ':') : NULL;
  if (!at || !colon) {
    fprintf(stderr, "fault_inject: expected OPS@PATH[#N]:ACTION[=ARG], found '%s'\n", text);
    abort();
  }
  *at = *colon = '\0';
  r->ops = parse_ops(text);
  char* hash = strchr(at + 1, '#');
  if (hash) {
    *hash = '\0';
    r->skip = atol(hash + 1);
  }
  snprintf(r->path, sizeof r->path, "%s", at + 1);
  char* action = colon + 1;
  char* eq = strchr(action, '=');
  const char* arg = eq ? eq + 1 : "";
  if (eq) *eq = '\0';
  if (!strcmp(action, "fail")) r->action = kFail, r->arg = parse_errno(arg);
  else if (!strcmp(action, "full")) r->action = kFull, r->arg = atol(arg);
  else if (!strcmp(action, "kill")) r->action = kKill;
  else if (!strcmp(action, "delay")) r->action = kDelay, r->arg = atol(arg);
  else if (!strcmp(action, "swap")) r->action = kSwap, snprintf(r->file, sizeof r->file, "%s", arg);
  else if (!strcmp(action, "overwrite")) r->action = kOverwrite, snprintf(r->file, sizeof r->file, "%s", arg);
  else {
    fprintf(stderr, "fault_inject: unknown action '%s'\n", action);
    abort();
  }
}

#define FIND(name) real_##name = dlsym(RTLD_NEXT, #name)

__attribute__((constructor)) static void init(void) {
  FIND(open); FIND(open64); FIND(openat); FIND(openat64); FIND(creat); FIND(fopen); FIND(fopen64);
  FIND(write); FIND(pwrite); FIND(pwrite64); FIND(writev); FIND(fsync); FIND(fdatasync);
  FIND(mkdir); FIND(mkdirat); FIND(rename); FIND(renameat); FIND(renameat2);
  FIND(unlink); FIND(unlinkat); FIND(rmdir); FIND(remove);
  const char* rules = getenv("KILN_FAULTS");
  if (rules && *rules) {
    char* copy = strdup(rules);
    for (char* save = NULL, *rule = strtok_r(copy, ";", &save); rule; rule = strtok_r(NULL, ";", &save))
      parse_rule(rule);
    free(copy);
  }
  const char* trace = getenv("KILN_FAULT_TRACE");
  if (trace && *trace) g_trace_fd = real_open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const char* trace_path = getenv("KILN_FAULT_TRACE_PATH");
  if (trace_path && *trace_path) g_trace_path = trace_path;
}

// The path a descriptor was opened on ("" when unknown).
static void fd_path(int fd, char* out, size_t size) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, out, size - 1);
  out[n > 0 ? n : 0] = '\0';
}

// `path` made absolute against `dirfd`, for the *at functions.
static void at_path(int dirfd, const char* path, char* out, size_t size) {
  if (path[0] == '/' || dirfd == AT_FDCWD) {
    snprintf(out, size, "%s", path);
    return;
  }
  char dir[PATH_MAX];
  fd_path(dirfd, dir, sizeof dir);
  snprintf(out, size, "%s/%s", dir, path);
}

static const char* op_name(int op) {
  switch (op) {
    case kOpenW: return "openw";
    case kOpenR: return "openr";
    case kWrite: return "write";
    case kFsync: return "fsync";
    case kMkdir: return "mkdir";
    case kRename: return "rename";
    default: return "unlink";
  }
}

static void trace(int op, const char* path, const char* path2) {
  if (g_trace_fd < 0) return;
  if (!strstr(path, g_trace_path) && !(path2 && strstr(path2, g_trace_path))) return;
  char line[2 * PATH_MAX + 32];
  const int n = snprintf(line, sizeof line, "%s %s%s%s\n", op_name(op), path, path2 ? " " : "",
                         path2 ? path2 : "");
  if (n > 0) real_write(g_trace_fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static int matches(const Rule* r, int op, const char* path, const char* path2) {
  return (r->ops & op) && (strstr(path, r->path) || (path2 && strstr(path2, r->path)));
}

// Replaces `path` with the bytes of `with`: through a new file renamed over it, or
// written into the file itself.
static void replace_file(const char* path, const char* with, int in_place) {
  char tmp[PATH_MAX + 16];
  snprintf(tmp, sizeof tmp, "%s.swap", path);
  const int in = real_open(with, O_RDONLY | O_CLOEXEC);
  const int out = real_open(in_place ? path : tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (in < 0 || out < 0) abort();
  char buf[1 << 16];
  for (ssize_t n; (n = read(in, buf, sizeof buf)) > 0;)
    if (real_write(out, buf, (size_t)n) != n) abort();
  close(in);
  close(out);
  if (!in_place && real_rename(tmp, path) != 0) abort();
}

// What the rules say about an operation about to happen: 0 to go on, or -1 with
// errno set to fail it. *after is set to the rule whose action follows the
// operation (kill, swap, overwrite); *budget to the bytes a full disk still takes.
static int before(int op, const char* path, const char* path2, const Rule** after, long* budget) {
  *after = NULL;
  if (budget) *budget = -1;
  for (int i = 0; i < g_nrules; ++i) {
    Rule* r = &g_rules[i];
    if (!matches(r, op, path, path2)) continue;
    if (__atomic_fetch_add(&r->seen, 1, __ATOMIC_SEQ_CST) < r->skip) continue;
    switch (r->action) {
      case kFail: errno = (int)r->arg; return -1;
      case kFull:
        if (op != kWrite) break;
        if (budget) *budget = r->arg - __atomic_load_n(&g_written, __ATOMIC_SEQ_CST);
        if (budget && *budget <= 0) {
          errno = ENOSPC;
          return -1;
        }
        break;
      case kDelay: {
        // The whole delay, as a slow disk would take it, even if a signal comes.
        struct timespec t = {r->arg / 1000000, (r->arg % 1000000) * 1000};
        while (nanosleep(&t, &t) != 0 && errno == EINTR) {
        }
        break;
      }
      default:
        if (!((r->action == kSwap || r->action == kOverwrite) && r->done)) *after = r;
    }
  }
  return 0;
}

static void after_op(int op, const char* path, const char* path2, const Rule* r, int ok) {
  if (ok) trace(op, path, path2);
  if (!r || !ok) return;
  if (r->action == kKill) {
    kill(getpid(), SIGKILL);
    pause();
  }
  if (r->action == kSwap || r->action == kOverwrite) {
    ((Rule*)r)->done = 1;
    replace_file(path, r->file, r->action == kOverwrite);
  }
}

static int writable(int flags) { return (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)) != 0; }

static int do_open(int (*real)(int, const char*, int, ...), int (*real_plain)(const char*, int, ...),
                   int dirfd, const char* path, int flags, mode_t mode) {
  char full[PATH_MAX];
  at_path(dirfd, path, full, sizeof full);
  const int op = writable(flags) ? kOpenW : kOpenR;
  const Rule* r;
  if (before(op, full, NULL, &r, NULL) != 0) return -1;
  const int fd = real ? real(dirfd, path, flags, mode) : real_plain(path, flags, mode);
  const int saved = errno;
  after_op(op, full, NULL, r, fd >= 0);
  errno = saved;
  return fd;
}

static mode_t mode_arg(int flags, va_list ap) {
  return (flags & (O_CREAT | __O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return do_open(NULL, real_open, AT_FDCWD, path, flags, mode);
}
int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return do_open(NULL, real_open64, AT_FDCWD, path, flags, mode);
}
int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return do_open(real_openat, NULL, dirfd, path, flags, mode);
}
int openat64(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return do_open(real_openat64, NULL, dirfd, path, flags, mode);
}
// What _FORTIFY_SOURCE builds call for an open without a mode.
int __open_2(const char* path, int flags) { return do_open(NULL, real_open, AT_FDCWD, path, flags, 0); }
int __open64_2(const char* path, int flags) { return do_open(NULL, real_open64, AT_FDCWD, path, flags, 0); }
int __openat_2(int dirfd, const char* path, int flags) { return do_open(real_openat, NULL, dirfd, path, flags, 0); }
int creat(const char* path, mode_t mode) { return open(path, O_WRONLY | O_CREAT | O_TRUNC, mode); }

static FILE* do_fopen(FILE* (*real)(const char*, const char*), const char* path, const char* mode) {
  const int op = strpbrk(mode, "wa+") ? kOpenW : kOpenR;
  const Rule* r;
  if (before(op, path, NULL, &r, NULL) != 0) return NULL;
  FILE* f = real(path, mode);
  const int saved = errno;
  after_op(op, path, NULL, r, f != NULL);
  errno = saved;
  return f;
}
FILE* fopen(const char* path, const char* mode) { return do_fopen(real_fopen, path, mode); }
FILE* fopen64(const char* path, const char* mode) { return do_fopen(real_fopen64, path, mode); }

// write, pwrite, writev: a full disk takes what fits, then fails (as write(2) does).
static ssize_t do_write(int fd, size_t size, ssize_t (*call)(int, size_t, const void*), const void* ctx) {
  if (fd <= 2 || g_nrules == 0) return call(fd, size, ctx);  // the terminal is no file of interest
  char path[PATH_MAX];
  fd_path(fd, path, sizeof path);
  const Rule* r;
  long budget;
  if (before(kWrite, path, NULL, &r, &budget) != 0) return -1;
  if (budget >= 0 && (size_t)budget < size) size = (size_t)budget;
  const ssize_t n = call(fd, size, ctx);
  const int saved = errno;
  if (n > 0 && budget >= 0) __atomic_fetch_add(&g_written, n, __ATOMIC_SEQ_CST);
  after_op(kWrite, path, NULL, r, n >= 0);
  errno = saved;
  return n;
}

typedef struct { const void* buf; off_t offset; int positioned; } WriteArgs;
static ssize_t call_write(int fd, size_t size, const void* ctx) {
  const WriteArgs* a = ctx;
  return a->positioned ? real_pwrite(fd, a->buf, size, a->offset) : real_write(fd, a->buf, size);
}
ssize_t write(int fd, const void* buf, size_t size) {
  WriteArgs a = {buf, 0, 0};
  return do_write(fd, size, call_write, &a);
}
ssize_t pwrite(int fd, const void* buf, size_t size, off_t offset) {
  WriteArgs a = {buf, offset, 1};
  return do_write(fd, size, call_write, &a);
}
ssize_t pwrite64(int fd, const void* buf, size_t size, off_t offset) { return pwrite(fd, buf, size, offset); }

typedef struct { const struct iovec* iov; int count; } WritevArgs;
static ssize_t call_writev(int fd, size_t size, const void* ctx) {
  const WritevArgs* a = ctx;
  // A shortened writev (a full disk) writes the first `size` bytes: the vectors cut there.
  struct iovec cut[64];
  int n = 0;
  for (size_t left = size; n < a->count && n < 64 && left > 0; ++n) {
    cut[n] = a->iov[n];
    if (cut[n].iov_len > left) cut[n].iov_len = left;
    left -= cut[n].iov_len;
  }
  return real_writev(fd, cut, n);
}
ssize_t writev(int fd, const struct iovec* iov, int count) {
  size_t size = 0;
  for (int i = 0; i < count; ++i) size += iov[i].iov_len;
  if (count > 64) return real_writev(fd, iov, count);
  WritevArgs a = {iov, count};
  return do_write(fd, size, call_writev, &a);
}

static int do_fsync(int (*real)(int), int fd) {
  char path[PATH_MAX];
  fd_path(fd, path, sizeof path);
  const Rule* r;
  if (before(kFsync, path, NULL, &r, NULL) != 0) return -1;
  const int rc = real(fd);
  const int saved = errno;
  after_op(kFsync, path, NULL, r, rc == 0);
  errno = saved;
  return rc;
}
int fsync(int fd) { return do_fsync(real_fsync, fd); }
int fdatasync(int fd) { return do_fsync(real_fdatasync, fd); }

// mkdir, rename, unlink and their kin: the rules, the call, the trace.
#define PATH_OP(op, path, path2, call)                      \
  do {                                                      \
    const Rule* r;                                          \
    if (before(op, path, path2, &r, NULL) != 0) return -1;  \
    const int rc = (call);                                  \
    const int saved = errno;                                \
    after_op(op, path, path2, r, rc == 0);                  \
    errno = saved;                                          \
    return rc;                                              \
  } while (0)

int mkdir(const char* path, mode_t mode) { PATH_OP(kMkdir, path, NULL, real_mkdir(path, mode)); }
int mkdirat(int dirfd, const char* path, mode_t mode) {
  char full[PATH_MAX];
  at_path(dirfd, path, full, sizeof full);
  PATH_OP(kMkdir, full, NULL, real_mkdirat(dirfd, path, mode));
}
int rename(const char* from, const char* to) { PATH_OP(kRename, from, to, real_rename(from, to)); }
int renameat(int fromfd, const char* from, int tofd, const char* to) {
  char a[PATH_MAX], b[PATH_MAX];
  at_path(fromfd, from, a, sizeof a);
  at_path(tofd, to, b, sizeof b);
  PATH_OP(kRename, a, b, real_renameat(fromfd, from, tofd, to));
}
int renameat2(int fromfd, const char* from, int tofd, const char* to, unsigned flags) {
  char a[PATH_MAX], b[PATH_MAX];
  at_path(fromfd, from, a, sizeof a);
  at_path(tofd, to, b, sizeof b);
  PATH_OP(kRename, a, b, real_renameat2(fromfd, from, tofd, to, flags));
}
int unlink(const char* path) { PATH_OP(kUnlink, path, NULL, real_unlink(path)); }
int unlinkat(int dirfd, const char* path, int flags) {
  char full[PATH_MAX];
  at_path(dirfd, path, full, sizeof full);
  PATH_OP(kUnlink, full, NULL, real_unlinkat(dirfd, path, flags));
}
int rmdir(const char* path) { PATH_OP(kUnlink, path, NULL, real_rmdir(path)); }
int remove(const char* path) { PATH_OP(kUnlink, path, NULL, real_remove(path)); }
