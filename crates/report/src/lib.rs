//! Printers of a run's results, one per output format, all over the one summary type
//! [`volley_metrics::RunResult`]:
//!
//! - [`write_text`]: the human summary, with the accounting equation checked;
//! - [`write_json`], [`write_json_file_atomic`], [`read_json_file`]: the results file
//!   (`volley.results/1`, docs/results-schema.md);
//! - [`write_csv_series`]: the per-second series as CSV;
//! - [`progress_line`]: the live line while a run goes;
//! - [`write_bench_table`]: the `volley bench` comparison table;
//! - charts: one pure function per chart builds its [`ChartData`] from [`NamedRun`]s
//!   ([`response_rate_series`], [`latency_percentile_series`], ...), and [`render_svg`] /
//!   [`render_png`] draw it with no system library (embedded font);
//! - [`write_html_report`]: one self-contained HTML file of one or more runs;
//! - [`compare`]: key figures of runs or groups of repeated runs side by side, with ratios and
//!   the run-to-run noise rule;
//! - [`merge_runs`]: results of runs made at the same time, combined exactly;
//! - [`write_openmetrics`], [`progress_metrics`]: OpenMetrics text of a run or of a live one.
//!
//! Every duration goes through [`fmt_ns`]; tables are built with the small column model of
//! [`Table`].

mod bench;
mod chart;
mod compare;
mod csv;
mod experiment;
mod html;
mod input;
mod json;
mod merge;
mod openmetrics;
mod progress;
mod render;
mod shotgun;
pub mod table;
mod text;
mod units;

pub use bench::{bench_table, write_bench_table, BenchRow};
pub use chart::{
    all_charts, cdf_points, connections_series, handshake_cdf_series, has_connections, latency_over_time_series,
    latency_percentile_series, limit_latency_series, limit_series, link_series, percentile_points, qps_series,
    query_trace_series, response_rate_series, target_cpu_series, Axis, Band, ChartData, LimitResult, LimitStep, Marker,
    Scale, Series, Style, Unit, SLOWEST_PERCENTILES,
};
pub use compare::{
    compare, write_compare_json, write_compare_text, Better, Comparison, Figure, GroupStat, Metric, Side, Verdict,
    NOISE_RULE,
};
pub use csv::write_csv_series;
pub use experiment::{read_experiment, write_html_experiments, write_html_experiments_file, EXPERIMENT_SCHEMA};
pub use html::{
    shell_quote, write_html_comparison, write_html_comparison_file, write_html_report, write_html_report_file,
    write_html_report_file_with_limits, write_html_report_with_limits,
};
pub use input::{unique_names, MergedPart, NamedRun};
pub use json::{read_json_file, write_file_atomic, write_json, write_json_file_atomic, ReportError};
pub use merge::{merge_runs, write_merged_file, MergeError, Merged};
pub use openmetrics::{
    cumulative_buckets, progress_metrics, write_metrics_file_atomic, write_openmetrics, LiveTotals, LATENCY_BOUNDS_NS,
};
pub use progress::progress_line;
pub use render::{render_png, render_svg, ChartError, CHART_SIZE};
pub use shotgun::ShotgunError;
pub use table::{Align, Table};
pub use text::{write_text, MAX_COLUMNS};
pub use units::{fmt_bytes, fmt_ns, fmt_pct, fmt_rate, fmt_ratio_pct, fmt_secs};
