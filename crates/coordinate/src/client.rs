//! A part's side of the protocol: join, measure the clock offset, say ready and learn the
//! start, report progress, hand in the results.

use std::io::{self, BufReader};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use volley_metrics::RunResult;

use crate::protocol::{recv, send, Hello, PartProgress, ToCoordinator, ToPart};
use crate::unix_ns;

/// Clock probes per join; the one with the shortest round trip gives the offset.
const PROBES: usize = 8;

#[derive(Debug, Error)]
pub enum CoordError {
    #[error("coordinator {addr}: {err}")]
    Connect { addr: String, err: io::Error },
    #[error("refused by the coordinator: {0}")]
    Refused(String),
    #[error("coordinator lost: {0}")]
    Lost(String),
}

/// A part joined to its coordinator.
pub struct PartLink {
    addr: String,
    writer: Arc<Mutex<TcpStream>>,
    reader: BufReader<TcpStream>,
    pub index: u32,
    pub parts: u32,
    /// The coordinator's clock minus this part's, ns.
    pub offset_ns: i64,
    /// The round trip of the probe that measured it, ns.
    pub rtt_ns: u64,
    running: Arc<AtomicBool>,
}

fn lost(e: impl std::fmt::Display) -> CoordError {
    CoordError::Lost(e.to_string())
}

/// A read that timed out says so in words (the system's words are "Resource temporarily
/// unavailable"): a coordinator that accepts the connection and never answers.
fn unanswered(e: io::Error, wait: Duration) -> io::Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {:.1} s", wait.as_secs_f64()))
        }
        _ => e,
    }
}

impl PartLink {
    /// Connects to `addr` (HOST:PORT, a name resolved here: a Kubernetes Service), says hello
    /// and measures the clock offset. `connect` bounds the connection (tried again until it is
    /// over: the coordinator may not be up yet) and each answer before the start.
    pub fn join(addr: &str, hello: &Hello, connect: Duration) -> Result<PartLink, CoordError> {
        let cerr = |err| CoordError::Connect { addr: addr.to_string(), err };
        // The coordinator may not be up yet (an orchestrator starts its tasks in no order, a
        // Service's name resolves once its pod runs): try again until the window is over.
        let deadline = std::time::Instant::now() + connect;
        let stream = loop {
            let attempt = addr.to_socket_addrs().and_then(|addrs| {
                let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
                for a in addrs {
                    let left =
                        deadline.saturating_duration_since(std::time::Instant::now()).max(Duration::from_millis(100));
                    match TcpStream::connect_timeout(&a, left) {
                        Ok(s) => return Ok(s),
                        Err(e) => last = e,
                    }
                }
                Err(last)
            });
            match attempt {
                Ok(s) => break s,
                Err(e) if std::time::Instant::now() + Duration::from_millis(200) >= deadline => return Err(cerr(e)),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        };
        let _ = stream.set_nodelay(true);
        stream.set_read_timeout(Some(connect)).map_err(cerr)?;
        stream.set_write_timeout(Some(connect)).map_err(cerr)?;
        let mut writer = stream.try_clone().map_err(cerr)?;
        let mut reader = BufReader::new(stream);
        send(&mut writer, &ToCoordinator::Hello(hello.clone())).map_err(cerr)?;
        let (index, parts) = match recv::<ToPart, _>(&mut reader) {
            Ok(Some(ToPart::Welcome { index, parts })) => (index, parts),
            Ok(Some(ToPart::Refused { reason })) => return Err(CoordError::Refused(reason)),
            Ok(Some(other)) => return Err(cerr(io::Error::other(format!("unexpected answer {other:?}")))),
            Ok(None) => return Err(cerr(io::Error::new(io::ErrorKind::UnexpectedEof, "closed the connection"))),
            Err(e) => return Err(cerr(unanswered(e, connect))),
        };
        // NTP's offset and delay from the probe with the shortest round trip.
        let mut best: Option<(u64, i64)> = None;
        for _ in 0..PROBES {
            let t1 = unix_ns();
            send(&mut writer, &ToCoordinator::Time { t1 }).map_err(cerr)?;
            match recv::<ToPart, _>(&mut reader) {
                Ok(Some(ToPart::Time { t1: back, t2, t3 })) if back == t1 => {
                    let t4 = unix_ns();
                    let rtt = t4.saturating_sub(t1).saturating_sub(t3.saturating_sub(t2));
                    let offset = ((t2 as i128 - t1 as i128) + (t3 as i128 - t4 as i128)) / 2;
                    if best.is_none_or(|(r, _)| rtt < r) {
                        best = Some((rtt, offset as i64));
                    }
                }
                Ok(other) => return Err(cerr(io::Error::other(format!("unexpected answer {other:?}")))),
                Err(e) => return Err(cerr(unanswered(e, connect))),
            }
        }
        let (rtt_ns, offset_ns) = best.unwrap_or((0, 0));
        Ok(PartLink {
            addr: addr.to_string(),
            writer: Arc::new(Mutex::new(writer)),
            reader,
            index,
            parts,
            offset_ns,
            rtt_ns,
            running: Arc::new(AtomicBool::new(true)),
        })
    }

    /// Says ready and waits for the start (`wait` at most); returns it as Unix ns on this
    /// part's clock. From now on a thread says once a second that this part is alive.
    pub fn ready(&mut self, wait: Duration) -> Result<u64, CoordError> {
        self.send(&ToCoordinator::Ready)?;
        self.reader.get_ref().set_read_timeout(Some(wait)).map_err(lost)?;
        let start = match recv::<ToPart, _>(&mut self.reader) {
            Ok(Some(ToPart::Start { unix_ns })) => unix_ns,
            Ok(Some(ToPart::Refused { reason })) => return Err(CoordError::Refused(reason)),
            Ok(Some(other)) => return Err(lost(format!("unexpected answer {other:?}"))),
            Ok(None) => return Err(lost("it closed the connection before the start")),
            Err(e) => return Err(lost(e)),
        };
        // A heartbeat of this run's own (a split limit search says ready once a step).
        self.running.store(false, Ordering::Relaxed);
        self.running = Arc::new(AtomicBool::new(true));
        // Live messages never hold the run up for long: a coordinator that stops reading costs a
        // part at most this per message, and the message is lost.
        if let Ok(s) = self.writer.lock() {
            let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
        }
        let w = self.writer.clone();
        let running = self.running.clone();
        std::thread::spawn(move || {
            while running.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                let Ok(mut s) = w.lock() else { return };
                if send(&mut *s, &ToCoordinator::Alive).is_err() {
                    return;
                }
            }
        });
        Ok((start as i128 - i128::from(self.offset_ns)).max(0) as u64)
    }

    /// A split limit search: waits (`wait` at most) for the coordinator's next step: its
    /// number and the whole run's load; None when the search is over.
    pub fn next_step(&mut self, wait: Duration) -> Result<Option<(u32, f64)>, CoordError> {
        self.send(&ToCoordinator::Waiting)?;
        self.reader.get_ref().set_read_timeout(Some(wait)).map_err(lost)?;
        match recv::<ToPart, _>(&mut self.reader) {
            Ok(Some(ToPart::Step { number, load })) => Ok(Some((number, load))),
            Ok(Some(ToPart::Done)) => Ok(None),
            Ok(Some(ToPart::Refused { reason })) => Err(CoordError::Refused(reason)),
            Ok(Some(other)) => Err(lost(format!("unexpected message {other:?}"))),
            Ok(None) => Err(lost("it closed the connection before the search ended")),
            Err(e) => Err(lost(e)),
        }
    }

    /// Reports a completed second; a coordinator gone is ignored (the run goes on).
    pub fn progress(&self, p: PartProgress) {
        let _ = self.send(&ToCoordinator::Progress(p));
    }

    /// Says the part could not run.
    pub fn failed(&self, error: &str) {
        let _ = self.send(&ToCoordinator::Failed { error: error.to_string() });
    }

    /// Hands in the results and waits (`wait` at most) for the coordinator to say it has them.
    pub fn results(&mut self, r: &RunResult, wait: Duration) -> Result<(), CoordError> {
        self.running.store(false, Ordering::Relaxed);
        {
            let mut s = self.writer.lock().map_err(|_| lost("lock"))?;
            let _ = s.set_write_timeout(Some(wait));
            send(&mut *s, &ToCoordinator::Results(Box::new(r.clone()))).map_err(lost)?;
        }
        self.reader.get_ref().set_read_timeout(Some(wait)).map_err(lost)?;
        match recv::<ToPart, _>(&mut self.reader) {
            Ok(Some(ToPart::Received)) => Ok(()),
            Ok(other) => Err(lost(format!("no receipt for the results ({other:?})"))),
            Err(e) => Err(lost(e)),
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn send(&self, m: &ToCoordinator) -> Result<(), CoordError> {
        let mut s = self.writer.lock().map_err(|_| lost("lock"))?;
        send(&mut *s, m).map_err(lost)
    }
}

impl Drop for PartLink {
    fn drop(&mut self) {
        self.running.store(false, Ordering::Relaxed);
    }
}
