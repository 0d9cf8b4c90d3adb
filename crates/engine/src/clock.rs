//! Clocks: one monotonic nanosecond clock for the whole run (the same one the precise
//! timer uses), thread CPU time, and wall-clock stamps for results.

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds.
#[inline]
pub fn now_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC)
}

/// CPU time (user + system) of the calling thread, nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process, nanoseconds.
pub fn process_cpu_ns() -> u64 {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time (user + system, every thread, those ended included) of another process on this
/// host, nanoseconds, from its CPU-time clock (`clock_getcpuclockid`); None when there is no
/// such process (any more).
pub fn pid_cpu_ns(pid: u32) -> Option<u64> {
    let mut id: libc::clockid_t = 0;
    // SAFETY: clock_getcpuclockid writes the clock id into the variable we own.
    if unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut id) } != 0 {
        return None;
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    if unsafe { libc::clock_gettime(id, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Milliseconds since the Unix epoch.
pub fn unix_ns() -> u64 {
    clock(libc::CLOCK_REALTIME)
}

pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// RFC 3339 UTC with milliseconds, e.g. `2026-11-21T03:04:05.678Z`.
pub fn rfc3339(unix_ms: u64) -> String {
    volley_wire::rfc3339(unix_ms * 1_000_000, 3)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_time_of_a_process() {
        let me = super::pid_cpu_ns(std::process::id()).expect("our own CPU clock");
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(20) {}
        assert!(super::pid_cpu_ns(std::process::id()).unwrap() >= me + 10_000_000);
        // pid_max is at most 2^22: this one cannot exist.
        assert_eq!(super::pid_cpu_ns(1 << 23), None);
    }

    #[test]
    fn rfc3339() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(1_795_661_045_678), "2026-11-26T02:44:05.678Z");
        assert_eq!(super::rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
