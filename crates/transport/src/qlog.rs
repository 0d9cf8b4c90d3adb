//! qlog traces of QUIC connections (DoQ, DoH/3), client and server: one file per connection
//! in a directory (`--qlog DIR`), in qlog's JSON-SEQ form (`.sqlog`, draft-ietf-quic-qlog,
//! as quinn writes it), which qvis loads. seeds/002 compared handshakes by such traces.
//!
//! Shared by the client transports and the responder, which asks for a stream per connection
//! it accepts.
//!
//! quinn (0.11) records packets and recovery metrics but no frames, so nothing of the streams.
//! volley adds the streams' events to the same file, in the same schema (qlog's
//! `transport:stream_state_updated` and `transport:data_moved`, as the qlog crate that quinn
//! writes with defines them), from where the streams are used: a [`Trace`] shares the file
//! with quinn, whose writes are held back until an event's record is whole, so that records of
//! both never mix. DoQ's and DoH/3's clients and servers report each stream's opening, the
//! bytes moved between the application and QUIC (DoH/3: the HTTP/3 frames), and its end.
//!
//! quinn's header record names no vantage point (`"type": "unknown"`) and no reference time;
//! volley completes it as it passes to the file: `trace.vantage_point` says `client` or
//! `server` (so qvis draws the trace from the right side), and `trace.common_fields` holds
//! the wall-clock `reference_time` (milliseconds since the Unix epoch) that every event's
//! relative `time` counts from, with `time_format` `relative` and the protocols.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub use ::qlog::events::quic::StreamState;
use ::qlog::events::quic::{DataMoved, StreamStateUpdated, StreamType};
use ::qlog::events::{DataRecipient, Event, EventData};

/// Connections traced so far by this process, numbering the files.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// Checks that `dir` can hold traces: created if missing, and writable. The message names it.
pub fn prepare_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--qlog {}: {e}", dir.display()))?;
    let probe = dir.join(format!(".volley-qlog-{}", std::process::id()));
    File::create(&probe).map_err(|e| format!("--qlog {}: cannot write there: {e}", dir.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// The file of the next connection: `ROLE-PID-SEQ.sqlog`.
fn next_path(dir: &Path, role: &str) -> PathBuf {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{role}-{}-{n:06}.sqlog", std::process::id()))
}

/// A qlog stream for one new connection (`role` `client` or `server`, DoH/3 if `h3`, else
/// DoQ), written to a file of its own in `dir`, and the
/// [`Trace`] that adds the streams' events to it (see [`register`]); `None` when the file cannot
/// be made (the connection goes on untraced).
pub fn stream(dir: &Path, role: &str, h3: bool, title: String) -> Option<(quinn::QlogStream, Trace)> {
    let file = File::create(next_path(dir, role)).ok()?;
    // Buffered: an event at a time is written; the buffer is flushed when the connection's
    // state and the last of its streams are dropped, at its end.
    let (start, wall) = (Instant::now(), SystemTime::now());
    let shared = Arc::new(Shared { file: Mutex::new(BufWriter::with_capacity(64 * 1024, file)), start });
    let reference_ms = wall.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    let header = Some(HeaderFix { role: role.to_string(), reference_ms, h3 });
    let mut c = quinn::QlogConfig::default();
    c.writer(Box::new(Records { pending: Vec::new(), header, shared: shared.clone() }))
        .start_time(shared.start)
        .title(Some(title))
        .description(Some(format!("volley {}", env!("CARGO_PKG_VERSION"))));
    Some((c.into_stream()?, Trace(shared)))
}

/// The file of one connection's trace.
struct Shared {
    file: Mutex<BufWriter<File>>,
    /// The trace's reference time (quinn's too): events count milliseconds from it.
    start: Instant,
}

/// quinn's writer: its bytes go to the file a whole record at a time (a JSON-SEQ record ends
/// with a newline; JSON inside has none).
struct Records {
    pending: Vec<u8>,
    /// What the header record (the first) lacks, until it has passed.
    header: Option<HeaderFix>,
    shared: Arc<Shared>,
}

/// The vantage point and reference time quinn leaves out of the header record.
struct HeaderFix {
    /// `client` or `server`.
    role: String,
    /// The trace's start on the wall clock, ms since the Unix epoch.
    reference_ms: f64,
    /// DoH/3 (HTTP/3 over QUIC), else DoQ.
    h3: bool,
}

impl HeaderFix {
    /// The header record `rec` (RS, JSON, newline) with the vantage point and common fields
    /// set; unchanged if it does not parse.
    fn apply(&self, rec: &[u8]) -> Vec<u8> {
        let body = rec.strip_prefix(&[0x1e]).unwrap_or(rec);
        let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(body) else { return rec.to_vec() };
        let Some(trace) = v.get_mut("trace").and_then(|t| t.as_object_mut()) else { return rec.to_vec() };
        let ty = if matches!(self.role.as_str(), "client" | "server") { self.role.as_str() } else { "unknown" };
        trace.insert("vantage_point".into(), serde_json::json!({"name": "volley", "type": ty}));
        let protocols: &[&str] = if self.h3 { &["QUIC", "HTTP3"] } else { &["QUIC"] };
        trace.insert(
            "common_fields".into(),
            serde_json::json!({"reference_time": self.reference_ms, "time_format": "relative", "protocol_type": protocols}),
        );
        let mut out = vec![0x1e];
        if serde_json::to_writer(&mut out, &v).is_err() {
            return rec.to_vec();
        }
        out.push(b'\n');
        out
    }
}

impl Write for Records {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        if self.pending.last() == Some(&b'\n') {
            if let Some(fix) = self.header.take() {
                self.pending = fix.apply(&self.pending);
            }
            let mut file = self.shared.file.lock().unwrap_or_else(|p| p.into_inner());
            file.write_all(&self.pending)?;
            self.pending.clear();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.shared.file.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}

/// Adds stream events to one connection's trace. Cheap to clone (each stream keeps one).
#[derive(Clone)]
pub struct Trace(Arc<Shared>);

impl Trace {
    /// A stream changed state (`transport:stream_state_updated`).
    pub fn stream_state(&self, stream_id: u64, old: Option<StreamState>, new: StreamState) {
        self.event(EventData::StreamStateUpdated(StreamStateUpdated {
            stream_id,
            stream_type: Some(if stream_id & 2 == 0 { StreamType::Bidirectional } else { StreamType::Unidirectional }),
            old,
            new,
            stream_side: None,
        }));
    }

    /// `length` bytes at `offset` of a stream moved from the application to QUIC (`sent`) or
    /// from QUIC to the application (`transport:data_moved`).
    pub fn data_moved(&self, stream_id: u64, offset: u64, length: u64, sent: bool) {
        let (from, to) = if sent {
            (DataRecipient::Application, DataRecipient::Transport)
        } else {
            (DataRecipient::Transport, DataRecipient::Application)
        };
        self.event(EventData::DataMoved(DataMoved {
            stream_id: Some(stream_id),
            offset: Some(offset),
            length: Some(length),
            from: Some(from),
            to: Some(to),
            raw: None,
        }));
    }

    fn event(&self, data: EventData) {
        let time = self.0.start.elapsed().as_secs_f32() * 1000.0;
        let mut record = vec![0x1e];
        if serde_json::to_writer(&mut record, &Event::with_time(time, data)).is_ok() {
            record.push(b'\n');
            let _ = self.0.file.lock().unwrap_or_else(|p| p.into_inner()).write_all(&record);
        }
    }
}

/// The traces of the connections alive, by [`quinn::Connection::stable_id`]: where a stream is
/// used, only the connection is at hand.
static TRACES: Mutex<Option<HashMap<usize, Weak<Shared>>>> = Mutex::new(None);
/// Whether any trace was registered (a run without `--qlog` never takes the lock).
static ANY: AtomicBool = AtomicBool::new(false);

/// Ties `trace` to `conn`, for [`of`].
pub fn register(conn: &quinn::Connection, trace: &Trace) {
    let mut traces = TRACES.lock().unwrap_or_else(|p| p.into_inner());
    let traces = traces.get_or_insert_with(HashMap::new);
    // The traces of connections that ended are gone (their file closed): forget them.
    traces.retain(|_, t| t.strong_count() > 0);
    traces.insert(conn.stable_id(), Arc::downgrade(&trace.0));
    ANY.store(true, Ordering::Relaxed);
}

/// The trace of `conn`, if it is traced.
pub fn of(conn: &quinn::Connection) -> Option<Trace> {
    if !ANY.load(Ordering::Relaxed) {
        return None;
    }
    let traces = TRACES.lock().unwrap_or_else(|p| p.into_inner());
    traces.as_ref()?.get(&conn.stable_id())?.upgrade().map(Trace)
}
