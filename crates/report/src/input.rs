//! Results files read for reports, comparisons and merges: a [`RunResult`] with the name it is
//! shown under, and the parts it was merged from when `volley merge` wrote it. DNS Shotgun's
//! results files are read too, as runs (`shotgun.rs`).

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use volley_metrics::{RunResult, TargetInfo, SCHEMA};

use crate::json::ReportError;

/// One run as reports show it: a name (the file stem or a `--label`), the results, and where
/// they came from.
#[derive(Debug, Clone)]
pub struct NamedRun {
    /// The name charts and tables show (file stem or `--label`).
    pub name: String,
    /// The file it was read from, if any.
    pub path: Option<PathBuf>,
    /// The results.
    pub result: RunResult,
    /// The parts of a merged results file (`merged_from`), empty for a plain run.
    pub merged_from: Vec<MergedPart>,
}

/// One input of `volley merge`, recorded in the merged file as an element of `merged_from`
/// (an additive field of `volley.results/1`, ignored by readers that do not know it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergedPart {
    /// The file given to `volley merge`.
    pub file: String,
    /// The command line that produced that part, to repeat it.
    pub command: Vec<String>,
    /// Its target.
    pub target: TargetInfo,
    /// Its start, Unix milliseconds.
    pub started_unix_ms: u64,
    /// How many seconds its series was shifted to align with the earliest part.
    pub offset_s: u32,
    /// `complete` or `interrupted`.
    pub status: String,
    /// Which part of a split run it was (`I/N`, `--part`), when it was one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub part: Option<String>,
}

impl NamedRun {
    /// A run with a name and no file behind it (tests, runs made in-process).
    pub fn new(name: impl Into<String>, result: RunResult) -> NamedRun {
        NamedRun { name: name.into(), path: None, result, merged_from: Vec::new() }
    }

    /// Reads a results file (schema checked first, as [`crate::read_json_file`] does), named
    /// `label` or else after the file's stem (`runs/udp.json` → `udp`).
    pub fn read(path: &Path, label: Option<&str>) -> Result<NamedRun, ReportError> {
        let text = fs::read_to_string(path).map_err(|source| {
            if path.is_dir() {
                ReportError::IsDirectory { path: path.to_path_buf() }
            } else {
                ReportError::Io { path: path.to_path_buf(), op: "read results", source }
            }
        })?;
        let json_err = |source| ReportError::Json { path: path.to_path_buf(), source };
        // DNS Shotgun's results read as a run (crate::shotgun), so old measurements sit beside new.
        let mut value: serde_json::Value = if crate::shotgun::is_lines_format(&text) {
            crate::shotgun::read_lines(&text, path)?
        } else {
            let v = serde_json::from_str(&text).map_err(json_err)?;
            if crate::shotgun::is_object_format(&v) {
                crate::shotgun::read_object(&v, path)?
            } else {
                v
            }
        };
        let found = value.get("schema").and_then(|s| s.as_str());
        if found != Some(SCHEMA) {
            return Err(ReportError::Schema { path: path.to_path_buf(), found: found.map(str::to_string) });
        }
        let merged_from = match value.as_object_mut().and_then(|o| o.remove("merged_from")) {
            Some(v) => serde_json::from_value(v).map_err(json_err)?,
            None => Vec::new(),
        };
        let mut result: RunResult = serde_json::from_value(value).map_err(json_err)?;
        result.upgrade();
        let name = match label {
            Some(l) => l.to_string(),
            None => stem(path),
        };
        Ok(NamedRun { name, path: Some(path.to_path_buf()), result, merged_from })
    }
}

/// The file name without its directory and last extension (`a/b/run.1.json` → `run.1`).
pub(crate) fn stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}

/// Makes names unique by appending ` (2)`, ` (3)`... to repeats, so that chart legends and
/// table columns can be told apart.
pub fn unique_names(runs: &mut [NamedRun]) {
    let mut seen: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for r in runs.iter_mut() {
        let n = seen.entry(r.name.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            r.name = format!("{} ({})", r.name, n);
        }
    }
}
