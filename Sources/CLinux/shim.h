#ifndef CAMRIG_CLINUX_SHIM_H
#define CAMRIG_CLINUX_SHIM_H
// Linux interfaces Swift's Glibc module does not import: variadic calls (prctl) wrapped in functions,
// and the socket timestamping constants of <linux/net_tstamp.h> and <linux/errqueue.h>.
#include <sys/mman.h>
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

#endif
