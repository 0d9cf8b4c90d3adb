//! `volley report`: results files in, a self-contained HTML report, chart files (SVG, PNG), the
//! per-second series as CSV, or OpenMetrics text out.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use volley_report::{all_charts, render_png, render_svg, unique_names, NamedRun, CHART_SIZE};

use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  One run, one HTML file (opens with no network access: CSS and charts are inline):
    volley report udp.json -o report.html

  Several runs in one report, each with its section, plus a comparison against the first:
    volley report udp.json tcp.json dot.json -o transports.html --label UDP --label TCP --label DoT

  Every chart as SVG and PNG files (ID.svg, ID.png in DIR; several runs share each chart):
    volley report udp.json tcp.json --charts charts/ --chart-format svg,png

  The per-second series as CSV, and OpenMetrics text, of one run:
    volley report udp.json --csv udp.csv --openmetrics udp.prom

  A limit search's step curves with the limits marked (`volley limit -o limit.json`):
    volley report --limit limit.json -o limit.html --charts charts/

  Experiments (`volley experiment run NAME -o NAME.json`): each study's table, checks and charts:
    volley report --experiment handshakes.json --experiment overhead.json -o studies.html

Charts: response_rate, latency_percentiles, latency_over_time, qps, connections (connection-based
transports), handshake_cdf (when handshakes were measured), limit and limit_latency (--limit).
See docs/report.md.

Exit status: 0 done; 1 an output could not be written; 2 bad input (unreadable or incompatible
results file, bad flags).";

/// Chart file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChartFormat {
    /// Scalable vector graphics.
    Svg,
    /// PNG image, 960x540.
    Png,
}

#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct ReportArgs {
    /// Results files (volley.results/1): one run each, or merged runs.
    #[arg(value_name = "RESULTS.json", required_unless_present_any = ["limit", "experiment"])]
    pub files: Vec<PathBuf>,

    /// A `volley limit` results file (volley.limit/1): its searches' step curves, with the
    /// limits marked, in the report and the charts (repeatable).
    #[arg(long, value_name = "FILE")]
    pub limit: Vec<PathBuf>,

    /// A `volley experiment run -o` file (volley.experiment/1): a page of each study's table,
    /// checks and charts, the study's figures beside the measurement (repeatable; with -o,
    /// without results files).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["limit", "charts", "csv", "openmetrics"])]
    pub experiment: Vec<PathBuf>,

    /// Write the HTML report to FILE (atomically).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Name of a run in charts and tables, one per file in order [default: the file's stem].
    #[arg(long, value_name = "NAME")]
    pub label: Vec<String>,

    /// Write every chart into DIR (created if missing) as ID.svg and/or ID.png.
    #[arg(long, value_name = "DIR")]
    pub charts: Option<PathBuf>,

    /// Chart file formats for --charts (comma-separated).
    #[arg(long, value_name = "LIST", value_enum, value_delimiter = ',', default_values = ["svg", "png"])]
    pub chart_format: Vec<ChartFormat>,

    /// Write the per-second series of the results file as CSV to FILE (`-`: standard output).
    /// Takes one results file.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,

    /// Write the OpenMetrics (Prometheus) text of the results file to FILE (`-`: standard
    /// output). Takes one results file.
    #[arg(long, value_name = "FILE")]
    pub openmetrics: Option<PathBuf>,
}

/// Reads results files named by `--label`s or their stems; a bad file is exit 2, naming it.
pub fn read_runs(files: &[PathBuf], labels: &[String]) -> CliResult<Vec<NamedRun>> {
    if labels.len() > files.len() {
        return Err(CliError::usage(format!(
            "{} --label for {} results files: give at most one per file",
            labels.len(),
            files.len()
        )));
    }
    let mut runs = files
        .iter()
        .enumerate()
        .map(|(i, f)| NamedRun::read(f, labels.get(i).map(String::as_str)).map_err(CliError::usage))
        .collect::<CliResult<Vec<_>>>()?;
    unique_names(&mut runs);
    Ok(runs)
}

/// Writes `bytes` to `path`, or to standard output for `-`.
fn write_out(path: &Path, bytes: &[u8]) -> CliResult {
    if path == Path::new("-") {
        let mut out = io::stdout().lock();
        return match out.write_all(bytes).and_then(|_| out.flush()) {
            // A reader that stopped early (`| head`) wanted no more.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            r => r.map_err(|e| CliError::failure(format!("stdout: {e}"))),
        };
    }
    volley_atomic::write(path, bytes).map_err(|e| CliError::failure(format!("{}: cannot write: {e}", path.display())))
}

/// Reads `volley limit` results: every search of every file.
fn read_limits(files: &[PathBuf]) -> CliResult<Vec<volley_report::LimitResult>> {
    let mut out = Vec::new();
    for f in files {
        let text = fs::read(f).map_err(|e| CliError::usage(format!("{}: cannot read: {e}", f.display())))?;
        let v: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| CliError::usage(format!("{}: not JSON: {e}", f.display())))?;
        if v["schema"] != "volley.limit/1" {
            let found = match v["schema"].as_str() {
                Some(s) => format!("schema \"{s}\""),
                None => "no \"schema\" field".to_string(),
            };
            return Err(CliError::usage(format!(
                "{}: not a limit search ({found}, expected volley.limit/1)",
                f.display()
            )));
        }
        let searches: Vec<volley_report::LimitResult> = serde_json::from_value(v["searches"].clone())
            .map_err(|e| CliError::usage(format!("{}: searches: {e}", f.display())))?;
        out.extend(searches);
    }
    Ok(out)
}

pub fn run(a: ReportArgs) -> CliResult {
    if !a.experiment.is_empty() {
        return experiments(&a);
    }
    if a.output.is_none() && a.charts.is_none() && a.csv.is_none() && a.openmetrics.is_none() {
        return Err(CliError::usage(
            "nothing to write: give -o FILE (HTML report), --charts DIR, --csv FILE or --openmetrics FILE",
        ));
    }
    let single = a.csv.is_some() || a.openmetrics.is_some();
    if single && a.files.len() != 1 {
        return Err(CliError::usage(format!("--csv and --openmetrics take one results file, got {}", a.files.len())));
    }
    let runs = read_runs(&a.files, &a.label)?;
    let limits = read_limits(&a.limit)?;

    if let Some(path) = &a.output {
        volley_report::write_html_report_file_with_limits(&runs, &limits, path).map_err(CliError::failure)?;
        eprintln!("volley: report written to {}", path.display());
    }
    if let Some(dir) = &a.charts {
        fs::create_dir_all(dir).map_err(|e| CliError::failure(format!("{}: cannot create: {e}", dir.display())))?;
        let limit_charts = (!limits.is_empty())
            .then(|| [volley_report::limit_series(&limits), volley_report::limit_latency_series(&limits)]);
        for c in all_charts(&runs).into_iter().chain(limit_charts.into_iter().flatten()) {
            if a.chart_format.contains(&ChartFormat::Svg) {
                let svg = render_svg(&c, CHART_SIZE).map_err(CliError::failure)?;
                write_out(&dir.join(format!("{}.svg", c.id)), svg.as_bytes())?;
            }
            if a.chart_format.contains(&ChartFormat::Png) {
                let png = render_png(&c, CHART_SIZE).map_err(CliError::failure)?;
                write_out(&dir.join(format!("{}.png", c.id)), &png)?;
            }
        }
        eprintln!("volley: charts written to {}", dir.display());
    }
    if let Some(path) = &a.csv {
        let mut bytes = Vec::new();
        volley_report::write_csv_series(&runs[0].result, &mut bytes).map_err(CliError::failure)?;
        write_out(path, &bytes)?;
    }
    if let Some(path) = &a.openmetrics {
        let mut bytes = Vec::new();
        volley_report::write_openmetrics(&runs[0].result, &mut bytes).map_err(CliError::failure)?;
        write_out(path, &bytes)?;
    }
    Ok(())
}

/// `--experiment FILE... -o PAGE`: the experiments' page.
fn experiments(a: &ReportArgs) -> CliResult {
    let Some(path) = &a.output else {
        return Err(CliError::usage("--experiment needs -o FILE (the HTML page)"));
    };
    if !a.files.is_empty() {
        return Err(CliError::usage("--experiment takes no results files: give them in a report of their own"));
    }
    let docs = a
        .experiment
        .iter()
        .map(|f| {
            let v = volley_report::read_experiment(f).map_err(CliError::usage)?;
            let name = f.file_stem().map_or_else(|| f.display().to_string(), |s| s.to_string_lossy().into_owned());
            Ok((name, v))
        })
        .collect::<CliResult<Vec<_>>>()?;
    volley_report::write_html_experiments_file(&docs, path).map_err(CliError::failure)?;
    eprintln!("volley: report written to {}", path.display());
    Ok(())
}
