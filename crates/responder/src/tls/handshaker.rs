//! The costly step of a TLS handshake over TCP (DoT, DoH) on a thread of its own beside each
//! I/O thread, at the lowest priority (nice 19).
//!
//! A server handshake's work is almost all in one synchronous step: rustls taking the
//! ClientHello (`Accepted::into_connection`: the key exchange, and the signature of the
//! server's first flight), about 0.15 to 0.3 ms of CPU. On the I/O thread, which also answers
//! the established connections, a wave of handshakes (clients that reconnect together, or an
//! attacker that does) queues that work ahead of every answer, first come first served. Here
//! the I/O thread reads the ClientHello (cheap), hands the step to its handshake thread, and
//! finishes the handshake itself; the kernel runs the handshake thread only when the threads
//! that answer do not need the core (a waking nice-0 thread preempts it), so established
//! clients are answered first, and handshakes use what is left. The socket moves to the
//! handshake thread and back untouched (nothing polls it there).
//!
//! The thread is started with its I/O thread (so that the responder's CPU clock counts it)
//! and ends when the I/O thread does. Where it cannot run, the step runs on the I/O thread.

use std::sync::mpsc;

type Job = Box<dyn FnOnce() + Send>;

/// Niceness of the handshake threads: the lowest priority of the normal scheduler.
const NICE: libc::c_int = 19;

/// An I/O thread's way to its handshake thread.
#[derive(Default)]
pub(crate) struct Handshaker {
    tx: Option<mpsc::Sender<Job>>,
}

impl Handshaker {
    /// Starts a handshake thread named `name` (from the I/O thread: it then shares that
    /// thread's descriptor table); returns it (to be joined) and the I/O thread's handle to it.
    pub(crate) fn start(name: String) -> std::io::Result<(Option<std::thread::JoinHandle<()>>, Handshaker)> {
        let (tx, rx) = mpsc::channel::<Job>();
        let t = std::thread::Builder::new().name(name).spawn(move || {
            // SAFETY: setpriority on this thread's own ID (Linux: per thread).
            unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, NICE) };
            for job in rx {
                job();
            }
        })?;
        Ok((Some(t), Handshaker { tx: Some(tx) }))
    }

    /// Runs `f` on the handshake thread and waits for its result; on this thread when there
    /// is none. None only if the thread is gone with the job.
    pub(crate) async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        match &self.tx {
            Some(to) => {
                if let Err(mpsc::SendError(job)) = to.send(job) {
                    job();
                }
            }
            None => job(),
        }
        rx.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_on_the_handshake_thread_at_low_priority() {
        let (t, h) = Handshaker::start("volley-tls-test".into()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (name, nice) = rt
            .block_on(h.run(|| {
                // SAFETY: getpriority of this thread; errno is not needed for these values.
                let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
                (std::thread::current().name().map(str::to_string), nice)
            }))
            .unwrap();
        assert_eq!(name.as_deref(), Some("volley-tls-test"));
        assert_eq!(nice, NICE);
        drop(h);
        t.unwrap().join().unwrap();
        // No thread: the job runs here.
        let here = rt.block_on(Handshaker::default().run(|| std::thread::current().id())).unwrap();
        assert_eq!(here, std::thread::current().id());
    }
}
