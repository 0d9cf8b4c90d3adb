//! The live line printed on stderr while a run goes.

use volley_metrics::Progress;

use crate::units::{fmt_ns, fmt_pct, fmt_secs};

/// One status line for a terminal, from the last complete second, e.g.
/// `[  3s/10s]  qps 48210  answered 99.98%  p99 412µs  timeouts 0  errors 0`, then for
/// connection-based transports `conns 64 (+3 -3)` (open at the end of the second, opened and
/// closed in it, and `N failed` when attempts failed).
///
/// `qps` is the queries issued in that second; `answered` is the share of answers among the
/// fates that happened in that second (answered + timed out + failed + unsent), `-` when none
/// did; `unsent N` shows the queries whose timeout came before they could leave, when any;
/// `p99` is of that second's answers. `total_s` is the planned length, `None` for a run bounded
/// by a count; a second past it in which nothing was sent reads `[3s/3s] ... waiting for the
/// last answers`. No newline: the caller prints it after `\r` and clears the rest of the line.
pub fn progress_line(p: &Progress, elapsed_s: f64, total_s: Option<f64>) -> String {
    let row = &p.row;
    // Past the planned length the run only waits for its last answers: the clock stops there.
    let waiting = total_s.is_some_and(|t| elapsed_s > t + 0.5) && row.issued == 0;
    let shown = match total_s {
        Some(t) if waiting => t,
        _ => elapsed_s,
    };
    let elapsed = format!("{}s", shown.max(0.0).floor() as u64);
    let clock = match total_s {
        Some(total) => {
            let total = fmt_secs(total);
            let w = total.chars().count().max(4);
            format!("[{elapsed:>w$}/{total}]")
        }
        None => format!("[{elapsed:>4}]"),
    };
    let ended = row.answered + row.timed_out + row.failed + row.unsent;
    let unsent = if row.unsent > 0 { format!("  unsent {}", row.unsent) } else { String::new() };
    let p99 = if row.answered == 0 { "-".to_string() } else { fmt_ns(row.latency.p99_ns) };
    // Connection-based transports: open at the end of the second, opened and closed in it,
    // and failed attempts when there were any.
    let conns = row.connections.as_ref().map_or(String::new(), |c| {
        let failed = if c.failed > 0 { format!(" {} failed", c.failed) } else { String::new() };
        let draining = if c.draining > 0 { format!(" {} draining", c.draining) } else { String::new() };
        format!("  conns {} (+{} -{}{failed}{draining})", c.active, c.opened, c.closed)
    });
    // With --target-pid: the target's CPU in that second, as a share of one core.
    let target = row.target_cpu_s.map_or(String::new(), |c| format!("  target cpu {:.0}%", c * 100.0));
    let wait = if waiting { "  waiting for the last answers" } else { "" };
    format!(
        "{clock}  qps {}  answered {}  p99 {p99}  timeouts {}  errors {}{unsent}{conns}{target}{wait}",
        row.issued,
        fmt_pct(row.answered, ended),
        row.timed_out,
        row.failed
    )
}
