/* The sandbox's per-test hot path in C (lcb/_native.py builds and loads it, lcb/_child.py calls it).

Why C: a zygote forks one test process per test. After that fork every page the two share is
copy-on-write, so each memory page that Python code touches in either of them costs a fault
(~2.5 us with a copy, ~0.6 us to take a page back once the test process has gone). The Python
steps around a test (the test process's entry: group, parent-death signal, Landlock scope,
stdio, descriptors, rlimits; the zygote's wait for exit, wall clock, CPU clock or a hang-up;
the reaping, the report, the next command) touch a few hundred such pages per test; the same
steps here touch a few. Nothing is decided here that lcb/_child.py does not decide in its
Python twin (_enter_test_process, _Watched.wait and .finish, run_test, _Emitter.ran,
_run_command): the same system calls in the same order, the same exit codes for a failed step,
the same "ran" line; whatever this file does not handle goes back to Python, and without this
library the Python path runs instead (tests/lcb/test_native_helper.py compares the two).

Exported: lcb_fork_test(entry, watch) (one test), lcb_serve_tests(loop, entry) (the zygote's
loop over its tests, for the many that end plainly), lcb_seed_mt (random's fresh state for each
test process), lcb_serve_zygotes(server) (the fork server's loop over the jobs it forks a zygote
for directly; see that section), and lcb_source_sha256: the hash of this
file as built, which the harness reads from the library file before it lets a job use it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef LCB_SOURCE_SHA256
#error "build with -DLCB_SOURCE_SHA256=\"<sha256 of this file>\" (lcb/_native.py does)"
#endif
const char lcb_source_sha256[] = "lcb-source-sha256:" LCB_SOURCE_SHA256; /* lcb/_native.py reads it */

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define LCB_MAX_RLIMITS 8

/* What a test process sets up for itself before Python runs again (see _enter_test_process). */
struct lcb_entry {
    int input_fd;        /* this test's input: becomes 0 */
    int status_w;        /* the status pipe: becomes status_fd */
    int status_fd;       /* 3; every descriptor above it is closed */
    int devnull_fd;      /* for a stream without a file */
    int scope_ruleset;   /* Landlock scope-only ruleset to enforce, -1 for none */
    int zygote_pid;      /* the parent we must still have after setting the death signal */
    const char *stdout_path, *stderr_path; /* files in the job folder, NULL for /dev/null */
    int n_rlimits;
    int rlimit_which[LCB_MAX_RLIMITS];
    unsigned long long rlimit_value[LCB_MAX_RLIMITS];
    double began;        /* out, in the test process: when it started (CLOCK_MONOTONIC) */
};

/* How the zygote waits (see _Watched.wait); pid, pidfd and the two times are outputs. */
struct lcb_watch {
    double deadline;     /* CLOCK_MONOTONIC, i.e. Python's time.monotonic() */
    double cpu_limit;    /* seconds of the test process's CPU clock, negative for none */
    double cpu_poll_s;   /* how often the CPU clock is read */
    int commands_fd;     /* the harness's channel: a hang-up stops the wait, -1 for none */
    int pid, pidfd;
    double forked, ended;
    uint32_t *mt_state;  /* random's generator to reseed before the fork (lcb_seed_mt), or NULL */
    int *mt_index;
    int reseeded;        /* out, in both processes */
};

enum { LCB_EXITED = 1, LCB_TIMEOUT = 2, LCB_CPU = 3, LCB_STOPPED = 4 };
/* A failed entry step returns one of these to the test process's Python (it reports and exits). */
enum { LCB_ENTRY_SETPGID = -1, LCB_ENTRY_STDIO = -2, LCB_ENTRY_RLIMIT = -3 };
#define LCB_FORK_FAILED (-1000) /* minus errno */
#define LCB_WAIT_FAILED (-2000) /* minus errno; the test process is running (pid in watch) */

static double monotonic(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void close_above(int fd) {
    if (syscall(SYS_close_range, (unsigned)fd + 1, ~0U, 0) == 0)
        return;
    struct rlimit limit;  /* kernels before 5.9: every possible number */
    rlim_t top = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY ? limit.rlim_cur : (1 << 20);
    for (rlim_t n = (rlim_t)fd + 1; n < top && n < (1 << 20); n++)
        close((int)n);
}

static int enter(struct lcb_entry *e) {
    e->began = monotonic();
    if (setpgid(0, 0) != 0)
        return LCB_ENTRY_SETPGID;
    if (e->zygote_pid != 1)  /* init of our PID namespace: its end kills us without being asked */
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != e->zygote_pid)  /* the zygote died between fork and prctl */
        _exit(137);
    /* first, while the ruleset's descriptor is where the zygote left it (dup2 may reuse it) */
    if (e->scope_ruleset >= 0 && syscall(SYS_landlock_restrict_self, e->scope_ruleset, 0) != 0)
        _exit(125);  /* confinement was promised for this job: never run unconfined */
    if (dup2(e->input_fd, 0) < 0)
        return LCB_ENTRY_STDIO;
    const char *paths[2] = {e->stdout_path, e->stderr_path};
    for (int target = 1; target <= 2; target++) {
        const char *path = paths[target - 1];
        if (path == NULL) {
            if (dup2(e->devnull_fd, target) < 0)
                return LCB_ENTRY_STDIO;
            continue;
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || dup2(fd, target) < 0)
            return LCB_ENTRY_STDIO;
        close(fd);
    }
    if (dup2(e->status_w, e->status_fd) < 0)
        return LCB_ENTRY_STDIO;
    close_above(e->status_fd);  /* the zygote's channels, the job file, the ruleset: gone */
    for (int i = 0; i < e->n_rlimits && i < LCB_MAX_RLIMITS; i++) {
        struct rlimit limit = {(rlim_t)e->rlimit_value[i], (rlim_t)e->rlimit_value[i]};
        if (setrlimit(e->rlimit_which[i], &limit) != 0)
            return LCB_ENTRY_RLIMIT;
    }
    return 0;
}

static int exited(const struct lcb_watch *w) {
    siginfo_t info;
    info.si_pid = 0;
    return waitid(P_PID, (id_t)w->pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0;
}

/* Does not reap: the pid stays the zygote's to kill (lcb/_child.py finishes the test). */
static int wait_for(struct lcb_watch *w) {
    clockid_t clock = 0;
    int clock_state = 0;  /* 0: not asked yet, 1: have it, -1: unavailable */
    int commands = w->commands_fd;
    int watch_hangup = 0;  /* the first round waits for the exit alone */
    for (;;) {
        double remaining = w->deadline - monotonic();
        if (remaining <= 0)
            return LCB_TIMEOUT;
        double step = w->pidfd >= 0 ? remaining : (remaining < 0.002 ? remaining : 0.002);
        if (w->cpu_limit >= 0 && step > w->cpu_poll_s)
            step = w->cpu_poll_s;
        struct pollfd fds[2];
        int n = 0;
        if (w->pidfd >= 0)
            fds[n++] = (struct pollfd){.fd = w->pidfd, .events = POLLIN};
        int hangup_at = -1;
        if (watch_hangup) {
            hangup_at = n;
            fds[n++] = (struct pollfd){.fd = commands, .events = POLLIN};
        }
        int ready = poll(fds, (nfds_t)n, (int)(step * 1000.0) + 1);
        if (ready < 0 && errno != EINTR)
            return LCB_WAIT_FAILED - errno;
        if (ready > 0 && hangup_at >= 0 && fds[hangup_at].revents) {
            char byte;
            ssize_t got = recv(commands, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
                return LCB_STOPPED;  /* the harness hung up: it needs no more results */
            if (got > 0)
                commands = -1;  /* a queued command, not a hang-up: stop watching for this test */
        }
        watch_hangup = commands >= 0;
        if (w->pidfd >= 0 ? (ready > 0 && fds[0].revents) : exited(w))
            return LCB_EXITED;
        if (w->cpu_limit >= 0) {
            if (clock_state == 0)  /* asked only now: most tests end within the first round */
                clock_state = clock_getcpuclockid(w->pid, &clock) == 0 ? 1 : -1;
            struct timespec used;
            if (clock_state == 1 && clock_gettime(clock, &used) == 0
                && (double)used.tv_sec + (double)used.tv_nsec * 1e-9 > w->cpu_limit)
                return LCB_CPU;
        }
    }
}

int lcb_seed_mt(uint32_t *mt, int *index, const uint32_t *key, size_t key_length);

/* fork() for one test. In the test process: runs its entry and returns 0 (or a negative
   LCB_ENTRY_* when a step failed). In the zygote: returns how the wait ended (LCB_EXITED ...),
   or LCB_FORK_FAILED - errno, or LCB_WAIT_FAILED - errno with the test process still running. */
int lcb_fork_test(struct lcb_entry *entry, struct lcb_watch *watch) {
    watch->pid = -1;
    watch->pidfd = -1;
    watch->reseeded = watch->mt_state != NULL && lcb_seed_mt(watch->mt_state, watch->mt_index, NULL, 0) == 0;
    pid_t pid = fork();
    if (pid < 0)
        return LCB_FORK_FAILED - errno;
    if (pid == 0)
        return enter(entry);
    watch->forked = monotonic();
    watch->pid = pid;
    watch->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    int state = wait_for(watch);
    watch->ended = monotonic();
    return state;
}


/* ------------------------------------------------------------------ random's fresh state */

/* Each test process starts from a fresh state of Python's `random` (what random's at-fork hook
   does: seed() from 624 words of the system's randomness). Done by the zygote (lcb_fork_test), just
   before each fork, on the generator's own words: in the test process the same seeding cost
   ~0.09 ms per test (mostly its copied pages). MT19937's init_by_array, as CPython's
   _randommodule.c runs it; lcb/_child.py uses this only after checking, on a scratch generator,
   that it yields exactly the state random.Random(key).getstate() shows. */
#define MT_N 624

static void mt_init_by_array(uint32_t *mt, int *index, const uint32_t *key, size_t key_length) {
    mt[0] = 19650218U;
    for (int i = 1; i < MT_N; i++)
        mt[i] = 1812433253U * (mt[i - 1] ^ (mt[i - 1] >> 30)) + (uint32_t)i;
    *index = MT_N;
    size_t i = 1, j = 0;
    for (size_t k = MT_N > key_length ? MT_N : key_length; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525U)) + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= MT_N) {
            mt[0] = mt[MT_N - 1];
            i = 1;
        }
        if (j >= key_length)
            j = 0;
    }
    for (size_t k = MT_N - 1; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941U)) - (uint32_t)i;
        i++;
        if (i >= MT_N) {
            mt[0] = mt[MT_N - 1];
            i = 1;
        }
    }
    mt[0] = 0x80000000U;
}

/* Seed from ``key`` (for the check), or with key NULL from the system's randomness; 0 on success. */
int lcb_seed_mt(uint32_t *mt, int *index, const uint32_t *key, size_t key_length) {
    uint32_t fresh[MT_N];
    if (key == NULL) {
        size_t have = 0;
        while (have < sizeof(fresh)) {
            ssize_t got = getrandom((char *)fresh + have, sizeof(fresh) - have, GRND_NONBLOCK);
            if (got < 0) {
                if (errno == EINTR)
                    continue;
                return -1;
            }
            have += (size_t)got;
        }
        key = fresh;
        key_length = MT_N;
    }
    mt_init_by_array(mt, index, key, key_length);
    return 0;
}

/* ------------------------------------------------------------------ the zygote's test loop */

/* lcb_serve_tests: the zygote's loop over "run INDEX [last]" commands (see run_job), each test
   forked, entered and watched as by lcb_fork_test, then finished as _Watched.finish and
   run_test do (group killed, reaped with its rusage, status pipe read) and, where it ended
   plainly (the test process said nothing on its status pipe, or just what a functional test
   that returned says; no descendant is left), reported with the "ran" line Python would write. Anything else goes back to Python: a test
   that said something or left a descendant (LOOP_FINISHED, with everything measured), a
   command this loop does not parse (LOOP_COMMAND, with its descriptors), the test process
   itself (LOOP_CHILD). */
struct lcb_loop {
    /* in */
    int commands_fd, emit_fd, children_fd; /* children_fd: /proc/thread-self/children, or -1 */
    int is_init;                           /* the zygote is init of its PID namespace */
    int stdout_files, stderr_files;        /* per test files "stdout-N.txt" / "stderr-N.txt" */
    double wall_limit, cpu_limit, cpu_poll_s;
    uint32_t *mt_state;                    /* random's generator (lcb_seed_mt), NULL: not ours to seed */
    int *mt_index;
    int reseeded;                          /* out, for the test process: its generator is fresh */
    /* out: the current test, or the command handed back */
    int index, last, state, status, pid, status_r, status_w, input_fd;
    double began, wall_s, cpu_s;
    char message[257];
    int message_len, fds[1], n_fds;
    const char *said;                      /* what the test process wrote on its status pipe */
    int said_len;
};

/* Here rather than in the struct: a zygote's pages of it are touched only when a test says
   something (the caller's struct is zeroed when made, all 16 pages of it) */
static char said_buffer[65536];

enum { LOOP_CHILD = 1, LOOP_FINISHED = 2, LOOP_COMMAND = 3, LOOP_EOF = 4, LOOP_STOPPED = 5,
       LOOP_LAST = 6, LOOP_GONE = 7 };
#define LOOP_FAILED (-3000) /* minus errno */

static int receive(struct lcb_loop *l) {
    struct iovec part = {.iov_base = l->message, .iov_len = 256};
    union { char space[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
    /* room for one descriptor, as socket.recv_fds(sock, 256, 1): the kernel drops any more */
    struct msghdr header = {.msg_iov = &part, .msg_iovlen = 1, .msg_control = control.space,
                            .msg_controllen = CMSG_LEN(sizeof(int))};
    ssize_t got;
    do
        got = recvmsg(l->commands_fd, &header, MSG_CMSG_CLOEXEC);
    while (got < 0 && errno == EINTR);
    l->n_fds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&header); c != NULL; c = CMSG_NXTHDR(&header, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (l->n_fds < 1)
                l->fds[l->n_fds++] = fd;
            else
                close(fd);  /* never more than one kept, none left open */
        }
    }
    if (got <= 0) {  /* EOF or a broken channel: the harness is done or gone */
        for (int i = 0; i < l->n_fds; i++)
            close(l->fds[i]);
        l->n_fds = 0;
        return 0;
    }
    l->message_len = (int)got;
    l->message[got] = 0;
    return 1;
}

/* "run DIGITS" then optional words, "last" among them; 1 when parsed (index, last set). */
static int parse_run(struct lcb_loop *l) {
    if (l->n_fds != 1 || l->message_len < 5 || strncmp(l->message, "run ", 4) != 0)
        return 0;
    const char *p = l->message + 4;
    long index = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (digits > 9)
            return 0;
        index = index * 10 + (*p - '0');
    }
    if (digits == 0 || (*p != 0 && *p != ' '))
        return 0;
    l->last = 0;
    while (*p == ' ') {
        const char *word = ++p;
        while (*p != 0 && *p != ' ')
            p++;
        if (p - word == 4 && strncmp(word, "last", 4) == 0)
            l->last = 1;
    }
    if (*p != 0)  /* a NUL inside the message: not a command we parse */
        return 0;
    l->index = (int)index;
    return 1;
}

static int write_all(int fd, const char *data, size_t size) {
    while (size > 0) {
        ssize_t done = write(fd, data, size);
        if (done < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        data += done;
        size -= (size_t)done;
    }
    return 0;
}

static int descendants_left(const struct lcb_loop *l) {
    char any[16];
    if (!l->is_init) {  /* orphans of the test become ours as subreaper: reap those that ended */
        int status;
        while (waitpid(-1, &status, WNOHANG) > 0)
            ;
    }
    return l->children_fd < 0 || pread(l->children_fd, any, sizeof(any), 0) != 0;
}

static const char *const STATE_NAMES[] = {"", "exit", "timeout", "cpu", "stopped"};

/* A JSON number at p (RFC 8259 grammar), at most 40 characters: its length, or 0. */
static int json_number(const char *p, const char *end) {
    const char *start = p;
    if (p < end && *p == '-')
        p++;
    if (p < end && *p == '0')
        p++;
    else if (p < end && *p >= '1' && *p <= '9')
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    else
        return 0;
    if (p < end && *p == '.') {
        const char *digits = ++p;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        if (p == digits)
            return 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        const char *digits = p;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        if (p == digits)
            return 0;
    }
    return p - start <= 40 ? (int)(p - start) : 0;
}

/* The two lines a functional test process that returned says (_functional_process), exactly as
   json.dumps writes them: {"setup_cpu_s": NUMBER}\n{"returned": NUMBER}\n. Where the status
   pipe held exactly that, "info" is written as _status_info would make it; anything else is
   left to Python. Returns the length written into info (0: not that). */
static int functional_info(const char *said, int size, char *info, int room) {
    static const char first[] = "{\"setup_cpu_s\": ", second[] = "}\n{\"returned\": ", last[] = "}\n";
    const char *p = said, *end = said + size;
    if (size < (int)sizeof(first) || memcmp(p, first, sizeof(first) - 1) != 0)
        return 0;
    p += sizeof(first) - 1;
    int cpu = json_number(p, end);
    const char *cpu_at = p;
    p += cpu;
    if (cpu == 0 || end - p < (long)sizeof(second) - 1 || memcmp(p, second, sizeof(second) - 1) != 0)
        return 0;
    p += sizeof(second) - 1;
    int returned = json_number(p, end);
    const char *returned_at = p;
    p += returned;
    if (returned == 0 || end - p != (long)sizeof(last) - 1 || memcmp(p, last, sizeof(last) - 1) != 0)
        return 0;
    int written = snprintf(info, (size_t)room, "{\"setup_cpu_s\": %.*s, \"returned\": %.*s}",
                           cpu, cpu_at, returned, returned_at);
    return written > 0 && written < room ? written : 0;
}

int lcb_serve_tests(struct lcb_loop *l, struct lcb_entry *entry) {
    char stdout_path[32], stderr_path[32];
    for (;;) {
        if (!receive(l))
            return LOOP_EOF;
        if (!parse_run(l))
            return LOOP_COMMAND;
        int status_pipe[2];
        if (pipe2(status_pipe, O_CLOEXEC) != 0) {
            close(l->fds[0]);
            return LOOP_FAILED - errno;
        }
        l->status_r = status_pipe[0];
        l->status_w = status_pipe[1];
        l->input_fd = l->fds[0];
        snprintf(stdout_path, sizeof(stdout_path), "stdout-%d.txt", l->index);
        snprintf(stderr_path, sizeof(stderr_path), "stderr-%d.txt", l->index);
        entry->input_fd = l->input_fd;
        entry->status_w = l->status_w;
        entry->stdout_path = l->stdout_files ? stdout_path : NULL;
        entry->stderr_path = l->stderr_files ? stderr_path : NULL;
        struct lcb_watch watch = {.cpu_limit = l->cpu_limit, .cpu_poll_s = l->cpu_poll_s,
                                  .commands_fd = l->commands_fd};
        l->began = monotonic();
        watch.deadline = l->began + l->wall_limit;
        watch.mt_state = l->mt_state;
        watch.mt_index = l->mt_index;
        int state = lcb_fork_test(entry, &watch);
        l->reseeded = watch.reseeded;
        if (state <= 0 && state > LCB_FORK_FAILED) {  /* the test process */
            l->state = state;
            l->began = entry->began;
            return LOOP_CHILD;
        }
        if (watch.pid == -1) {  /* the fork failed */
            close(l->status_r);
            close(l->status_w);
            close(l->input_fd);
            return LOOP_FAILED - (LCB_FORK_FAILED - state);
        }
        close(l->status_w);
        close(l->input_fd);
        if (state < 0) {  /* the wait itself failed: the test process must not outlive it */
            kill(watch.pid, SIGKILL);
            waitpid(watch.pid, NULL, 0);
            close(l->status_r);
            return LOOP_FAILED - (LCB_WAIT_FAILED - state);
        }
        /* _Watched.finish: the group always (it may have left children), the process too if it is not done */
        kill(-watch.pid, SIGKILL);
        if (state != LCB_EXITED)
            kill(watch.pid, SIGKILL);
        struct rusage usage;
        int status;
        pid_t reaped;
        do
            reaped = wait4(watch.pid, &status, 0, &usage);
        while (reaped < 0 && errno == EINTR);
        if (watch.pidfd >= 0)
            close(watch.pidfd);
        l->pid = watch.pid;
        l->state = state;
        l->status = status;
        l->wall_s = monotonic() - l->began;
        l->cpu_s = (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec * 1e-6
                 + (double)usage.ru_stime.tv_sec + (double)usage.ru_stime.tv_usec * 1e-6;
        if (state == LCB_STOPPED) {  /* the harness needs no more results: nothing to read */
            close(l->status_r);
            return LOOP_STOPPED;
        }
        int flags = fcntl(l->status_r, F_GETFL);
        fcntl(l->status_r, F_SETFL, flags | O_NONBLOCK);
        l->said = said_buffer;
        l->said_len = 0;
        for (;;) {
            ssize_t got = read(l->status_r, said_buffer + l->said_len, sizeof(said_buffer) - (size_t)l->said_len);
            if (got > 0 && (l->said_len += (int)got) < (int)sizeof(said_buffer))
                continue;
            if (got < 0 && errno == EINTR)
                continue;
            break;
        }
        close(l->status_r);
        l->status_r = -1;
        char info[128] = "{}";
        if ((l->said_len > 0 && functional_info(l->said, l->said_len, info, sizeof(info)) == 0)
            || descendants_left(l))
            return LOOP_FINISHED;
        char line[384];
        int ending = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
        int size = snprintf(line, sizeof(line),
                            "{\"event\": \"ran\", \"index\": %d, \"state\": \"%s\", \"wall_s\": %.6f, "
                            "\"cpu_s\": %.6f, \"info\": %s, \"%s\": %d}\n",
                            l->index, STATE_NAMES[state], l->wall_s, l->cpu_s, info,
                            WIFSIGNALED(status) ? "signal" : "exit_code", ending);
        if (write_all(l->emit_fd, line, (size_t)size) != 0)
            return LOOP_GONE;
        if (l->last)
            return LOOP_LAST;
    }
}


/* ------------------------------------------------------------------ the fork server's loop

The fork server forks a zygote per program. After each fork the server shares its pages with the
new zygote, so every page its Python loop then writes (receive the job, parse it, reap, take a
network namespace, fork, pin, announce, close) is a copy: ~215 pages per program, about a
millisecond of CPU. This is the twin of that loop's common path (serve and _fork_zygote in
lcb/_child.py): a job for a zygote of its own, while no spare zygote waits. Whatever else comes
(a query, a message it does not parse, the first job below a parent folder the server has not
checked, a job when the filled modules are used up, a spare wanted) goes back to Python with the
message, which handles it as before. The zygotes and the network namespaces are Python's records,
copied into this struct before each call and read back after it (lcb/_child.py, _ServerLoop). */

#define LCB_MAX_ZYGOTES 128
#define LCB_MAX_NETNS 128
#define LCB_FOLDER_MAX 512
#define LCB_JOB_MESSAGE_MAX 65536

struct lcb_server {
    int sock;                 /* the harness's channel */
    int euid_root;            /* as root, a job's parent folder must be one Python checked */
    int pipelined, cpus;      /* a spare is wanted while fewer programs than CPUs run */
    int pool_left;            /* filled modules left for forks made here */
    int pool_used;            /* out: forks made here (in a zygote: its module's index) */
    int ns_usable;            /* in/out: PID and network namespaces prepared here (root) */
    int own_pid_ns, own_net_ns;
    int n_free;               /* network namespaces no live program uses, oldest first */
    int free_ns[LCB_MAX_NETNS];
    int n_zygotes;
    int zygote_pid[LCB_MAX_ZYGOTES];
    int zygote_net[LCB_MAX_ZYGOTES];          /* -1: none */
    char zygote_folder[LCB_MAX_ZYGOTES][LCB_FOLDER_MAX]; /* "" for a spare */
    char checked_parent[LCB_FOLDER_MAX];
    /* out */
    int message_len;
    int n_fds;
    int fds[2];
    int child_net, child_net_joined, child_ipc; /* in a zygote forked here */
    char message[LCB_JOB_MESSAGE_MAX + 1];
};

enum { SERVER_CHILD = 1, SERVER_MESSAGE = 2, SERVER_SPARE = 3 };
#define SERVER_FAILED (-3000) /* minus errno */

static int running_programs(const struct lcb_server *s) {
    int n = 0;
    for (int i = 0; i < s->n_zygotes; i++)
        n += s->zygote_folder[i][0] != 0;
    return n;
}

static int zygote_slot(const struct lcb_server *s, int pid) {
    for (int i = 0; i < s->n_zygotes; i++)
        if (s->zygote_pid[i] == pid)
            return i;
    return -1;
}

/* _reap: reap the zygotes that ended (their network namespaces go back to the pool); once one
   was, kill every child that is not a zygote (orphans of a dead zygote's tests). */
static void reap_zygotes(struct lcb_server *s) {
    int reaped = 0, status;
    for (;;) {
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid < 0 && errno == ECHILD)
            return;
        if (pid <= 0)
            break;
        reaped = 1;
        int i = zygote_slot(s, pid);
        if (i < 0)
            continue;
        if (s->zygote_net[i] >= 0 && s->n_free < LCB_MAX_NETNS)
            s->free_ns[s->n_free++] = s->zygote_net[i];
        s->n_zygotes--;
        s->zygote_pid[i] = s->zygote_pid[s->n_zygotes];
        s->zygote_net[i] = s->zygote_net[s->n_zygotes];
        memcpy(s->zygote_folder[i], s->zygote_folder[s->n_zygotes], LCB_FOLDER_MAX);
    }
    if (!reaped)
        return;
    static char list[65536];  /* (static: the server's stack stays small, its pages few) */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    size_t size = 0;
    for (;;) {
        ssize_t got = read(fd, list + size, sizeof(list) - 1 - size);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        size += (size_t)got;
        if (size == sizeof(list) - 1) {  /* full: a number cut at the end is no pid of ours */
            while (size > 0 && list[size - 1] != ' ' && list[size - 1] != '\n')
                size--;
            break;
        }
    }
    close(fd);
    list[size] = 0;
    for (char *p = list; *p;) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (zygote_slot(s, (int)pid) < 0)
            kill((pid_t)pid, SIGKILL);
        p = end;
        while (*p == ' ' || *p == '\n')
            p++;
    }
}

static int receive_job(struct lcb_server *s) {
    struct iovec part = {.iov_base = s->message, .iov_len = LCB_JOB_MESSAGE_MAX};
    union { char space[CMSG_SPACE(2 * sizeof(int))]; struct cmsghdr align; } control;
    /* room for two descriptors, as socket.recv_fds(sock, 65536, 2): the kernel drops any more */
    struct msghdr header = {.msg_iov = &part, .msg_iovlen = 1, .msg_control = control.space,
                            .msg_controllen = CMSG_LEN(2 * sizeof(int))};
    ssize_t got;
    do
        got = recvmsg(s->sock, &header, 0);
    while (got < 0 && errno == EINTR);
    s->n_fds = 0;
    if (got < 0)
        got = 0;  /* Python reads a failed receive as an empty message: shut down */
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&header); got > 0 && c != NULL; c = CMSG_NXTHDR(&header, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count && s->n_fds < 2; i++)
            memcpy(&s->fds[s->n_fds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    s->message_len = (int)got;
    s->message[got] = 0;
    return (int)got;
}

/* "PATH\nnamespaces|-\n-|CPU" with an absolute, plain PATH (no "//", no NUL, ASCII): 1 with
   its parts, else 0 (Python decides). */
static int parse_job(struct lcb_server *s, char **path, int *namespaces, int *cpu) {
    if (s->n_fds != 2 || (size_t)s->message_len != strlen(s->message))
        return 0;
    for (int i = 0; i < s->message_len; i++)
        if ((unsigned char)s->message[i] >= 0x80)
            return 0;
    char *first = strchr(s->message, '\n');
    char *second = first ? strchr(first + 1, '\n') : NULL;
    if (first == NULL || second == NULL || strchr(second + 1, '\n') != NULL)
        return 0;
    size_t path_len = (size_t)(first - s->message);
    if (path_len < 2 || path_len >= LCB_FOLDER_MAX || s->message[0] != '/' || s->message[path_len - 1] == '/')
        return 0;
    for (size_t i = 1; i < path_len; i++)
        if (s->message[i] == '/' && s->message[i - 1] == '/')
            return 0;
    if (second - first - 1 == 10 && strncmp(first + 1, "namespaces", 10) == 0)
        *namespaces = 1;
    else if (second - first - 1 == 1 && first[1] == '-')
        *namespaces = 0;
    else
        return 0;
    const char *c = second + 1;
    if (strcmp(c, "-") == 0) {
        *cpu = -1;
    } else {
        int value = 0, digits = 0;
        for (; *c >= '0' && *c <= '9'; c++, digits++)
            value = value * 10 + (*c - '0');
        if (*c != 0 || digits == 0 || digits > 4 || value >= CPU_SETSIZE)
            return 0;
        *cpu = value;
    }
    *path = s->message;
    return 1;
}

/* os.path.dirname of a plain absolute path (see parse_job), into out */
static void folder_of(const char *path, size_t len, char *out) {
    size_t cut = len;
    while (cut > 0 && path[cut - 1] != '/')
        cut--;
    cut = cut > 1 ? cut - 1 : cut;  /* "/a/b" -> "/a", "/a" -> "/" */
    memcpy(out, path, cut);
    out[cut] = 0;
}

/* ZygoteNamespaces.before_fork: the next zygote's network namespace (from the pool, or a new
   one), with a PID namespace prepared; -1 with nothing prepared; SERVER_FAILED-style below -1
   where we could not return to our own network namespace (Python raises, as it did). */
static int namespaces_before_fork(struct lcb_server *s) {
    if (!s->ns_usable)
        return -1;
    int net;
    if (s->n_free > 0) {
        net = s->free_ns[0];
        memmove(s->free_ns, s->free_ns + 1, (size_t)(--s->n_free) * sizeof(int));
    } else {
        if (unshare(CLONE_NEWNET) != 0) {
            s->ns_usable = 0;
            return -1;
        }
        net = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (setns(s->own_net_ns, CLONE_NEWNET) != 0) {
            if (net >= 0)
                close(net);
            return SERVER_FAILED - (errno ? errno : EPERM);
        }
        if (net < 0) {
            s->ns_usable = 0;
            return -1;
        }
    }
    if (unshare(CLONE_NEWPID) != 0) {
        if (s->n_free < LCB_MAX_NETNS)
            s->free_ns[s->n_free++] = net;
        s->ns_usable = 0;
        return -1;
    }
    return net;
}

int lcb_serve_zygotes(struct lcb_server *s) {
    s->pool_used = 0;
    for (;;) {
        if (s->pipelined && running_programs(s) < s->cpus)
            return SERVER_SPARE;  /* (only called while no spare waits) */
        struct pollfd ready = {.fd = s->sock, .events = POLLIN};
        int n = poll(&ready, 1, 1000);
        if (n < 0 && errno != EINTR)
            return SERVER_FAILED - errno;
        if (n <= 0) {
            reap_zygotes(s);
            continue;
        }
        char *path;
        int namespaces, cpu;
        if (receive_job(s) == 0 || !parse_job(s, &path, &namespaces, &cpu))
            return SERVER_MESSAGE;
        size_t path_len = (size_t)(strchr(path, '\n') - path);
        char folder[LCB_FOLDER_MAX], parent[LCB_FOLDER_MAX];
        folder_of(path, path_len, folder);
        folder_of(folder, strlen(folder), parent);
        if (s->pool_left <= 0 || s->n_zygotes >= LCB_MAX_ZYGOTES
            || (s->euid_root && strcmp(parent, s->checked_parent) != 0))
            return SERVER_MESSAGE;
        reap_zygotes(s);  /* first: a network namespace may have come free */
        int net = namespaces ? namespaces_before_fork(s) : -1;
        if (net < -1)
            return net;
        pid_t pid = fork();
        if (pid < 0) {
            int error = errno;
            if (net >= 0) {
                if (setns(s->own_pid_ns, CLONE_NEWPID) != 0)
                    s->ns_usable = 0;
                if (s->n_free < LCB_MAX_NETNS)
                    s->free_ns[s->n_free++] = net;
            }
            return SERVER_FAILED - error;
        }
        if (pid == 0) {  /* the zygote: what _fork_zygote's child does before Python goes on */
            close(s->sock);
            if (setsid() < 0)
                _exit(0);
            prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
            s->child_net = net;
            if (net >= 0) {  /* ZygoteNamespaces.in_zygote */
                s->child_net_joined = setns(net, CLONE_NEWNET) == 0;
                close(s->own_pid_ns);
                close(s->own_net_ns);
                for (int i = 0; i < s->n_free; i++)
                    close(s->free_ns[i]);
                for (int i = 0; i < s->n_zygotes; i++)
                    if (s->zygote_net[i] >= 0)
                        close(s->zygote_net[i]);
                close(net);
                s->child_ipc = unshare(CLONE_NEWIPC) == 0;
            }
            return SERVER_CHILD;
        }
        if (net >= 0 && setns(s->own_pid_ns, CLONE_NEWPID) != 0)
            s->ns_usable = 0;
        s->zygote_pid[s->n_zygotes] = pid;
        s->zygote_net[s->n_zygotes] = net;
        memcpy(s->zygote_folder[s->n_zygotes], folder, strlen(folder) + 1);
        s->n_zygotes++;
        s->pool_used++;
        s->pool_left--;
        if (cpu >= 0) {  /* _pin: it starts on its CPU */
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpu, &set);
            sched_setaffinity(pid, sizeof(set), &set);
        }
        char started[64];  /* _announce: the same line as json.dumps makes */
        int size = snprintf(started, sizeof(started), "{\"event\": \"started\", \"pid\": %d}\n", (int)pid);
        if (write(s->fds[0], started, (size_t)size) < 0) {
            /* as _announce: the harness learns of the zygote otherwise */
        }
        close(s->fds[0]);
        close(s->fds[1]);
        s->n_fds = 0;
        reap_zygotes(s);
    }
}
