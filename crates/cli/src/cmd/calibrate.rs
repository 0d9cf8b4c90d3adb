//! `volley calibrate`: a short run under a packet capture of its own, volley's figures beside
//! the wire's (docs/calibrate.md); or `--pcap FILE`, the wire's figures of a capture.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use volley_calibrate::{CalibrateError, Calibration, LiveCapture, Matcher, Proto, VolleyFigure};
use volley_transport::Scheme;

use super::run::{self, RunArgs};
use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  How far to trust volley's latency on this machine, over UDP and TCP, 4 in flight:
    volley calibrate udp://127.0.0.1:5353 -c 4 -T 1
    volley calibrate tcp://127.0.0.1:5353 -c 4 -T 1 -o calibration.json

  The wire's figures of a capture made by tcpdump:
    tcpdump -i lo -w run.pcap --time-stamp-precision nano port 5353
    volley calibrate --pcap run.pcap

The run's flags are those of `volley run` (a few seconds by default: -l 3s). The capture is an
AF_PACKET socket of volley's own on the interface that routes to the target (lo for loopback),
stamped by the kernel as tcpdump's are: capturing needs root or CAP_NET_RAW. Queries are matched
to their answers by addresses, ports, DNS ID and question (TCP streams reassembled). DoT, DoH and
DoQ are encrypted: their queries cannot be matched on the wire, and calibrate refuses them.

Exit status: 0 done; 2 bad input, nothing listening, an encrypted target, or capturing not
permitted; 130 interrupted; 1 any other failure.";

#[derive(Args, Debug, Clone)]
#[command(after_long_help = EXAMPLES)]
#[command(mut_arg("target", |a| a.required_unless_present_any(["mix", "server", "port", "mode", "pcap"])))]
#[command(mut_arg("output", |a| a.help("Write volley's figures and the wire's as JSON to FILE (atomically; volley.calibration/1)")))]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub run: RunArgs,

    /// Read a capture file (pcap or pcapng, e.g. tcpdump -w) instead of running: the wire's
    /// figures of every DNS query and answer in it, per transport.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["target", "server", "port", "mode", "concurrency", "rate", "duration", "count", "threads", "connections", "queries", "name", "random_under"],
        help_heading = "Calibration"
    )]
    pub pcap: Option<PathBuf>,

    /// With --pcap: only the traffic to and from this server.
    #[arg(long, value_name = "ADDR:PORT", requires = "pcap", help_heading = "Calibration")]
    pub pcap_server: Option<std::net::SocketAddr>,
}

/// How long a query waits for its answer on the wire in a capture file before it counts as
/// unanswered (capture time).
const PCAP_EXPIRY: Duration = Duration::from_secs(30);

pub fn run(a: CalibrateArgs) -> CliResult {
    run::check_output(&a.run.output)?;
    let (cal, interrupted) = match &a.pcap {
        Some(path) => (from_file(path, a.pcap_server)?, false),
        None => live(&a.run)?,
    };
    if let Some(path) = &a.run.output {
        cal.write_json_file(path).map_err(CliError::failure)?;
    }
    if !a.run.quiet {
        let mut out = std::io::stdout().lock();
        // A closed pipe (e.g. `| head`) is not an error of the calibration.
        let _ = match a.run.format {
            run::Format::Text => cal.write_text(&mut out),
            run::Format::Json => cal.write_json(&mut out),
        };
    }
    if interrupted {
        return Err(CliError { code: 130, message: "interrupted: the calibration is partial".into() });
    }
    Ok(())
}

/// The wire's figures of a capture file, of the traffic of `server` (all when None).
fn from_file(path: &std::path::Path, server: Option<std::net::SocketAddr>) -> CliResult<Calibration> {
    let file = std::fs::File::open(path).map_err(|e| CliError::usage(format!("--pcap {}: {e}", path.display())))?;
    let name = path.display().to_string();
    let mut matcher = Matcher::new(server, PCAP_EXPIRY.as_nanos() as u64);
    let broke =
        volley_calibrate::read_pcap(std::io::BufReader::new(file), &name, &mut matcher).map_err(|e| match e {
            CalibrateError::File { .. } => CliError::usage(format!("--pcap {e}")),
            e => CliError::failure(e),
        })?;
    let (wire, packets) = matcher.finish();
    let mut cal = Calibration::new("pcap", &name, wire, packets, None, None);
    cal.warnings.extend(broke);
    Ok(cal)
}

/// The calibration of a run under a capture, and whether the run was interrupted.
fn live(a: &RunArgs) -> CliResult<(Calibration, bool)> {
    if a.clients.is_some() || !a.mix.is_empty() || a.replay.is_some() || a.link.is_some() {
        return Err(CliError::usage(
            "calibrate measures one target in a closed or open loop: drop --clients, --mix, --replay and --link",
        ));
    }
    let mut a = a.clone();
    if a.duration.is_none() && a.count.is_none() {
        a.duration = Some(Duration::from_secs(3));
    }
    let mut plan = run::plan(&a)?;
    let proto = match plan.target.scheme {
        Scheme::Udp => Proto::Udp,
        Scheme::Tcp => Proto::Tcp,
        _ => {
            return Err(CliError::usage(format!(
                "{}: an encrypted transport: its queries cannot be matched to answers on the wire; calibrate udp:// or tcp://",
                plan.target.url
            )))
        }
    };
    let mut warnings = run::check_target(&mut plan)?;
    // The capture starts after the probe: the wire then holds the run's queries only. A query
    // waits on the wire as long as the run lets it (its timeout), and a second more.
    let expiry = (plan.timeout + Duration::from_secs(1)).as_nanos() as u64;
    let capture =
        LiveCapture::start(plan.target.addr, Matcher::new(Some(plan.target.addr), expiry)).map_err(|e| match e {
            CalibrateError::NotPermitted(_) => CliError::usage(e),
            e => CliError::failure(e),
        })?;
    let merged_before = volley_calibrate::live::tcp_merged_segments();
    let result = run::execute(&plan, a.progress, a.metrics_file.as_deref(), run::interrupt_flag(), None);
    let merged = volley_calibrate::live::tcp_merged_segments().zip(merged_before).map(|(b, a)| b.saturating_sub(a));
    // The last answers are in the kernel's queue by now; the capture reads them before it stops.
    std::thread::sleep(Duration::from_millis(100));
    let stopped = capture.stop().map_err(CliError::failure);
    let result = result?;
    let (matcher, stats) = stopped?;
    let (wire, packets) = matcher.finish();
    warnings.extend(result.warnings.iter().cloned());
    let mut cal = Calibration::new(
        "live",
        &plan.target.url,
        wire,
        packets,
        Some(stats),
        Some((proto, VolleyFigure::of(&result))),
    );
    if let (Proto::Tcp, Some(n @ 1..)) = (proto, merged) {
        warnings.push(format!(
            "tcp: the kernel merged {n} segments into ones already queued during the run (machine-wide): answers \
             that came apart but were read together take the later one's arrival time, so volley's tail can lie \
             later than the wire's by how late it read (docs/calibrate.md)"
        ));
    }
    cal.warnings.splice(0..0, warnings);
    Ok((cal, result.status == volley_metrics::Status::Interrupted))
}
