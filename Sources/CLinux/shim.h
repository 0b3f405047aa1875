#ifndef CAMRIG_CLINUX_SHIM_H
#define CAMRIG_CLINUX_SHIM_H
// Linux interfaces Swift's Glibc module does not import: variadic calls (prctl) wrapped in functions,
// and the socket timestamping constants of <linux/net_tstamp.h> and <linux/errqueue.h>.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <linux/errqueue.h>
#include <linux/net_tstamp.h>

/// PR_SET_TIMERSLACK for the calling thread: how much later than asked its timed waits may end.
static inline int camrig_set_timer_slack(unsigned long nanoseconds) {
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0);
}

/// PR_GET_TIMERSLACK for the calling thread, in nanoseconds (negative on error).
static inline long camrig_timer_slack(void) {
    return prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
}

/// The SO_TIMESTAMPING flags of a socket that reports the kernel's software transmit stamps on its
/// error queue, without the datagram's bytes, each with the send's counter (OPT_ID).
static const unsigned int camrig_tstamp_transmit_flags =
    SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_OPT_TSONLY;
static const int camrig_so_timestamping = SO_TIMESTAMPING;
static const int camrig_scm_timestamping = SCM_TIMESTAMPING;
static const unsigned char camrig_ee_origin_timestamping = SO_EE_ORIGIN_TIMESTAMPING;
static const unsigned int camrig_scm_tstamp_snd = SCM_TSTAMP_SND;
static const int camrig_msg_errqueue = MSG_ERRQUEUE;

/// mlockall flags: lock every page once it is touched, now and later, without faulting in whole
/// reservations (thread stacks, allocator arenas) at once.
static const int camrig_mlockall_on_fault = MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT;

/// Resource limits Glibc's module imports only under their internal names.
static const int camrig_rlimit_rtprio = RLIMIT_RTPRIO;
static const int camrig_rlimit_memlock = RLIMIT_MEMLOCK;

/// Starts `path` with `argv` and `envp` (NULL: this process's environment) as a child process.
///
/// The child's standard input, output and error are `stdin_fd`, `stdout_fd` and `stderr_fd` (-1: /dev/null);
/// every other descriptor is closed at exec, the signal mask is cleared and every signal's disposition reset
/// (a Swift task's thread may block signals, and NIO ignores SIGPIPE: neither should reach the child). With
/// `death_signal` non-zero the child gets that signal when the calling thread ends (PR_SET_PDEATHSIG, which
/// exec keeps), so it cannot outlive its parent; with `new_group` it leads a process group of its own.
///
/// Returns the child's pid, or a negative errno when it could not be started (exec failures included: the
/// child reports its errno on a close-on-exec pipe, as posix_spawn does). Between fork and exec the child
/// makes only async-signal-safe calls.
static inline pid_t camrig_spawn(const char *path, char *const argv[], char *const envp[], int stdin_fd, int stdout_fd,
                                 int stderr_fd, int death_signal, int new_group) {
    extern char **environ;
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) return -errno;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int failure = errno;
        close(report[0]);
        close(report[1]);
        return -failure;
    }
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        struct sigaction fallback;
        fallback.sa_handler = SIG_DFL;
        fallback.sa_flags = 0;
        sigemptyset(&fallback.sa_mask);
        for (int number = 1; number < NSIG; number++) sigaction(number, &fallback, NULL);
        if (death_signal != 0) {
            prctl(PR_SET_PDEATHSIG, death_signal, 0, 0, 0);
            // The parent may have died before the line above: then nobody would send the signal.
            if (getppid() != parent) _exit(127);
        }
        if (new_group) setpgid(0, 0);
        int sources[3] = {stdin_fd, stdout_fd, stderr_fd};
        // Move the sources above 2 first, so that dup2 below never overwrites one still to be used.
        for (int target = 0; target < 3; target++) {
            if (sources[target] < 0) {
                sources[target] = open("/dev/null", target == 0 ? O_RDONLY : O_WRONLY);
            }
            if (sources[target] >= 0 && sources[target] < 3) sources[target] = fcntl(sources[target], F_DUPFD, 3);
        }
        for (int target = 0; target < 3; target++) {
            if (sources[target] >= 0) dup2(sources[target], target);
        }
        // Every descriptor above 2 closes at exec (close_range's CLOEXEC flag, Linux 5.11; else one by one).
        if (syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */) != 0) {
            for (int fd = 3; fd < 65536; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        execve(path, argv, envp != NULL ? envp : environ);
        int failure = errno;
        ssize_t ignored = write(report[1], &failure, sizeof failure);
        (void)ignored;
        _exit(127);
    }
    close(report[1]);
    int failure = 0;
    ssize_t count;
    do {
        count = read(report[0], &failure, sizeof failure);
    } while (count < 0 && errno == EINTR);
    close(report[0]);
    if (count == (ssize_t)sizeof failure) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
        return -failure;
    }
    return pid;
}

/// The calling thread's id (what /proc/self/task/ lists).
static inline pid_t camrig_gettid(void) { return (pid_t)syscall(SYS_gettid); }

/// A pipe whose two ends close at exec: `fds[0]` reads, `fds[1]` writes. Returns 0, or -1 with errno set.
static inline int camrig_cloexec_pipe(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

// Starts writing a file's range to the disk without waiting for it (sync_file_range, SYNC_FILE_RANGE_WRITE):
// a long file written in pieces is then mostly on the disk when it is finally flushed.
// (The system call itself: the libc wrapper needs _GNU_SOURCE, which this module cannot define without
// clashing with Swift's own Glibc module. 2 is SYNC_FILE_RANGE_WRITE.)
static inline int camrig_start_writeback(int fd, long long offset, long long count) {
    return (int)syscall(SYS_sync_file_range, fd, offset, count, 2);
}

#endif
