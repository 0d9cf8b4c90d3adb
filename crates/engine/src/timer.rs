//! A timer with microsecond precision for the open-loop schedule: tokio's timer wheel ticks
//! in milliseconds, which would send queries in bursts and bias latency. A timerfd armed at
//! an absolute CLOCK_MONOTONIC time, with the thread's timer slack at 1 ns, wakes on time.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use tokio::io::unix::AsyncFd;

struct Fd(OwnedFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

pub struct PreciseTimer {
    fd: AsyncFd<Fd>,
}

impl PreciseTimer {
    /// Must be called inside a tokio runtime.
    pub fn new() -> io::Result<PreciseTimer> {
        // SAFETY: plain system calls; the descriptor is owned by OwnedFd from here on.
        let raw = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: the OwnedFd stays open, and is the same descriptor, for the AsyncFd's life.
        let fd = unsafe { AsyncFd::register(Fd(owned)) }.map_err(|e| e.into_parts().1)?;
        Ok(PreciseTimer { fd })
    }

    /// Sleeps until CLOCK_MONOTONIC reaches `at_ns` (returns at once if it has).
    pub async fn sleep_until(&self, at_ns: u64) -> io::Result<()> {
        if crate::clock::now_ns() >= at_ns {
            return Ok(());
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: (at_ns / 1_000_000_000) as _, tv_nsec: (at_ns % 1_000_000_000) as _ },
        };
        let fd = self.fd.as_raw_fd();
        loop {
            // SAFETY: valid descriptor and spec. Arming the timer also resets its count of
            // expiries (it is no longer readable): an expiry is never read, one system call
            // less per wake-up, of which the open loop makes thousands a second.
            if unsafe { libc::timerfd_settime(fd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) } < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut guard = self.fd.readable().await?;
            // The readiness is an expiry's (the runtime's epoll is edge-triggered: the next
            // expiry signals again, counted or not); cleared, so that the next sleep waits for
            // its own. One left from an earlier, abandoned sleep arms the timer again.
            guard.clear_ready();
            if crate::clock::now_ns() >= at_ns {
                return Ok(());
            }
        }
    }
}
