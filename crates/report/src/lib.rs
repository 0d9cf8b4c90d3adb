//! Printers of a run's results, one per output format, all over the one summary type
//! [`volley_metrics::RunResult`]:
//!
//! - [`write_text`]: the human summary, with the accounting equation checked;
//! - [`write_json`], [`write_json_file_atomic`], [`read_json_file`]: the results file
//!   (`volley.results/1`, docs/results-schema.md);
//! - [`write_csv_series`]: the per-second series as CSV;
//! - [`progress_line`]: the live line while a run goes;
//! - [`write_bench_table`]: the `volley bench` comparison table.
//!
//! Every duration goes through [`fmt_ns`]; tables are built with the small column model of
//! [`Table`].

mod bench;
mod csv;
mod json;
mod progress;
pub mod table;
mod text;
mod units;

pub use bench::{bench_table, write_bench_table, BenchRow};
pub use csv::write_csv_series;
pub use json::{read_json_file, write_json, write_json_file_atomic, ReportError};
pub use progress::progress_line;
pub use table::{Align, Table};
pub use text::{write_text, MAX_COLUMNS};
pub use units::{fmt_bytes, fmt_ns, fmt_pct, fmt_rate, fmt_ratio_pct, fmt_secs};
