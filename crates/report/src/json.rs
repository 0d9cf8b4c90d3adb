//! The results file: JSON of [`RunResult`] under the schema `volley.results/1`
//! (docs/results-schema.md), written atomically and read back with its schema checked.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter};
use volley_metrics::{RunResult, SCHEMA};

/// Why a results file could not be written or read. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Creating, writing, syncing, renaming or reading a file failed.
    #[error("{}: cannot {op}: {source}", path.display())]
    Io {
        /// The file the operation was about (the results file, not the temporary one).
        path: PathBuf,
        /// What was being done: `write results`, `read results`, ...
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The results path names a directory.
    #[error("{}: is a directory, not a results file", path.display())]
    IsDirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The file is not JSON, or not a run result.
    #[error("{}: not a volley results file: {source}", path.display())]
    Json {
        /// The file read.
        path: PathBuf,
        /// The parser's error, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// The file declares a schema this version does not read (or none).
    #[error(
        "{}: unsupported results schema {} (this volley reads {SCHEMA})",
        path.display(),
        found.as_deref().map(|s| format!("\"{s}\"")).unwrap_or_else(|| "(none: no \"schema\" field)".into())
    )]
    Schema {
        /// The file read.
        path: PathBuf,
        /// The value of its `schema` field, `None` when missing or not a string.
        found: Option<String>,
    },
    /// DNS Shotgun's results that cannot be read as a run.
    #[error(transparent)]
    Shotgun(#[from] crate::ShotgunError),
}

/// Writes `r` as pretty-printed JSON (two-space indent) followed by a newline. Arrays inside
/// arrays (the `[value_ns, count]` pairs of histograms) are written on one line each, so a
/// histogram takes one line per bucket.
pub fn write_json(r: &RunResult, w: &mut impl Write) -> io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(&mut *w, ResultsFormatter::new());
    r.serialize(&mut ser)?;
    w.write_all(b"\n")
}

/// serde_json's pretty formatter, except that any value nested in an array inside an array is
/// written compactly (`[100031, 1]`).
struct ResultsFormatter {
    pretty: PrettyFormatter<'static>,
    /// Open containers, innermost last: true for an array.
    arrays: Vec<bool>,
    /// How many open containers are written compactly (0: pretty).
    compact: usize,
}

impl ResultsFormatter {
    fn new() -> ResultsFormatter {
        ResultsFormatter { pretty: PrettyFormatter::new(), arrays: Vec::new(), compact: 0 }
    }
}

impl Formatter for ResultsFormatter {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        let compact = self.compact > 0 || self.arrays.last() == Some(&true);
        self.arrays.push(true);
        if compact {
            self.compact += 1;
            w.write_all(b"[")
        } else {
            self.pretty.begin_array(w)
        }
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.arrays.pop();
        if self.compact > 0 {
            self.compact -= 1;
            w.write_all(b"]")
        } else {
            self.pretty.end_array(w)
        }
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        match (self.compact > 0, first) {
            (true, true) => Ok(()),
            (true, false) => w.write_all(b", "),
            (false, _) => self.pretty.begin_array_value(w, first),
        }
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.compact > 0 {
            Ok(())
        } else {
            self.pretty.end_array_value(w)
        }
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.arrays.push(false);
        if self.compact > 0 {
            self.compact += 1;
            w.write_all(b"{")
        } else {
            self.pretty.begin_object(w)
        }
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.arrays.pop();
        if self.compact > 0 {
            self.compact -= 1;
            w.write_all(b"}")
        } else {
            self.pretty.end_object(w)
        }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        match (self.compact > 0, first) {
            (true, true) => Ok(()),
            (true, false) => w.write_all(b", "),
            (false, _) => self.pretty.begin_object_key(w, first),
        }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.compact > 0 {
            w.write_all(b": ")
        } else {
            self.pretty.begin_object_value(w)
        }
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.compact > 0 {
            Ok(())
        } else {
            self.pretty.end_object_value(w)
        }
    }
}

/// Writes `r` to `path` atomically (see [`write_file_atomic`]).
pub fn write_json_file_atomic(r: &RunResult, path: &Path) -> Result<(), ReportError> {
    write_file_atomic(path, |w| write_json(r, w))
}

/// Writes a file atomically through [`volley_atomic::AtomicFile`]: `fill` writes into a
/// temporary file next to `path`, which is fsynced and renamed over it; readers see the old file
/// or the whole new one, never a part. Devices and pipes (`/dev/null`, `/dev/stdout`) are written
/// in place. On any error nothing is left behind and the error names `path`.
pub fn write_file_atomic(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> Result<(), ReportError> {
    let io_err = |op: &'static str| move |source: io::Error| ReportError::Io { path: path.to_path_buf(), op, source };
    if path.is_dir() {
        return Err(ReportError::IsDirectory { path: path.to_path_buf() });
    }
    let mut file = volley_atomic::AtomicFile::create(path).map_err(io_err("create the results file"))?;
    fill(file.writer()).map_err(io_err("write results"))?;
    file.commit().map_err(io_err("write results"))
}

/// Reads a results file, checking its `schema` first so that a file of another version gets a
/// message naming the file and the schema rather than a missing-field error.
pub fn read_json_file(path: &Path) -> Result<RunResult, ReportError> {
    let text = fs::read_to_string(path).map_err(|source| {
        if path.is_dir() {
            ReportError::IsDirectory { path: path.to_path_buf() }
        } else {
            ReportError::Io { path: path.to_path_buf(), op: "read results", source }
        }
    })?;
    let json_err = |source| ReportError::Json { path: path.to_path_buf(), source };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(json_err)?;
    let found = value.get("schema").and_then(|s| s.as_str());
    if found != Some(SCHEMA) {
        return Err(ReportError::Schema { path: path.to_path_buf(), found: found.map(str::to_string) });
    }
    let mut r: RunResult = serde_json::from_value(value).map_err(json_err)?;
    r.upgrade();
    Ok(r)
}
