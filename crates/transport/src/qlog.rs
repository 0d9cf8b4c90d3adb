//! qlog traces of QUIC connections (DoQ, DoH/3), client and server: one file per connection
//! in a directory (`--qlog DIR`), in qlog's JSON-SEQ form (`.sqlog`, draft-ietf-quic-qlog,
//! as quinn writes it), which qvis loads. seeds/002 compared handshakes by such traces.
//!
//! Shared by the client transports and the responder, which asks for a stream per connection
//! it accepts.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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

/// A qlog stream for one new connection, written to a file of its own in `dir`; `None` when the
/// file cannot be made (the connection goes on untraced).
pub fn stream(dir: &Path, role: &str, title: String) -> Option<quinn::QlogStream> {
    let file = File::create(next_path(dir, role)).ok()?;
    let mut c = quinn::QlogConfig::default();
    // Buffered: quinn writes an event at a time; the buffer is flushed when the connection's
    // state is dropped, at its end.
    c.writer(Box::new(BufWriter::with_capacity(64 * 1024, file)))
        .title(Some(title))
        .description(Some(format!("volley {}", env!("CARGO_PKG_VERSION"))));
    c.into_stream()
}
