//! `volley run` against a real resolver, unbound, answering `local-data` records over UDP and
//! TCP.

mod common;

use common::*;

fn check_all_noerror(v: &serde_json::Value, url: &str, transport: &str, count: u64) {
    check_accounting(v);
    assert_eq!(v["status"], "complete", "{v:#}");
    assert_eq!(v["target"]["url"], url, "{v:#}");
    assert_eq!(v["target"]["transport"], transport, "{v:#}");
    let answered = total(v, "answered");
    assert!(answered > 0, "nothing answered:\n{v:#}");
    assert_eq!(total(v, "issued"), count, "-n {count} sends exactly {count} queries");
    assert_eq!(answered, count, "unbound on loopback answers every query:\n{:#}", v["totals"]);
    assert_eq!(rcode(v, "NOERROR"), answered, "every answer NOERROR:\n{:#}", v["totals"]);
    assert_eq!(total(v, "timed_out"), 0);
    assert_eq!(total(v, "failed"), 0);
    assert_eq!(total(v, "in_flight"), 0, "a run that stops on -n waits for its queries");
    assert_eq!(total(v, "truncated"), 0);
    assert_eq!(v["latency"]["count"].as_u64(), Some(answered), "one latency sample per answer");
    assert!(v["qps"]["answered"].as_f64().unwrap() > 0.0, "{v:#}");
}

#[test]
fn udp_closed_loop_against_unbound() {
    let ub = Unbound::start(UNBOUND_DATA);
    let url = ub.url("udp");
    let r = run_volley(&[&url, "--name", "www.example.test", "--qtype", "A", "-c", "10", "-n", "2000"]);
    check_all_noerror(r.ok(), &url, "udp", 2000);
}

#[test]
fn tcp_closed_loop_against_unbound() {
    let ub = Unbound::start(UNBOUND_DATA);
    let url = ub.url("tcp");
    let r = run_volley(&[&url, "--name", "www.example.test", "--qtype", "AAAA", "-c", "10", "-n", "2000"]);
    check_all_noerror(r.ok(), &url, "tcp", 2000);
}

#[test]
fn query_file_against_unbound_over_udp_and_tcp() {
    let ub = Unbound::start(UNBOUND_DATA);
    let dir = tempfile::tempdir().unwrap();
    let file = write_queries(
        dir.path(),
        "q.txt",
        &[
            "# local-data answers only",
            "www.example.test A",
            "",
            "; another comment style",
            "www.example.test AAAA",
            "www.example.test TXT",
            "mail.example.test MX",
        ],
    );
    let file = file.to_str().unwrap();
    for transport in ["udp", "tcp"] {
        let url = ub.url(transport);
        let r = run_volley(&[&url, "-d", file, "-c", "8", "-n", "1000"]);
        check_all_noerror(r.ok(), &url, transport, 1000);
    }
}

#[test]
fn open_loop_against_unbound() {
    let ub = Unbound::start(UNBOUND_DATA);
    for transport in ["udp", "tcp"] {
        let url = ub.url(transport);
        let r = run_volley(&[&url, "--name", "www.example.test", "--rate", "1000", "-l", "2s"]);
        let v = r.ok();
        check_accounting(v);
        assert_eq!(v["status"], "complete");
        let answered = total(v, "answered");
        assert!(answered > 0, "{v:#}");
        assert_eq!(rcode(v, "NOERROR"), answered);
        assert_eq!(total(v, "failed"), 0, "{:#}", v["totals"]);
        assert_eq!(total(v, "timed_out"), 0, "{:#}", v["totals"]);
        // An open loop never sends more than its schedule: 1000 qps for 2 s.
        assert!(total(v, "issued") <= 2000 + 20, "sent more than scheduled:\n{:#}", v["totals"]);
    }
}

/// User + system CPU time of a process from /proc/PID/stat, seconds (clock-tick resolution).
fn proc_cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // Fields 14 and 15 of the file: utime, stime; `after` starts at field 3.
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / tick_hz()
}

fn tick_hz() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// `--target-pid`: the CPU time unbound spent during the run, from its CPU-time clock, agrees
/// with what /proc says it spent between just before and just after the run; the summary
/// shows it and the figure per answer follows from it.
#[test]
fn target_cpu_of_unbound() {
    let ub = Unbound::start(UNBOUND_DATA);
    let url = ub.url("udp");
    let pid = ub.pid().to_string();
    let before = proc_cpu_s(ub.pid());
    let r = run_volley(&[&url, "--name", "www.example.test", "-c", "20", "-n", "40000", "--target-pid", &pid]);
    let after = proc_cpu_s(ub.pid());
    let v = r.ok();
    check_all_noerror(v, &url, "udp", 40000);
    let t = &v["target_cpu"];
    assert_eq!(t["pids"], serde_json::json!([ub.pid()]), "{t:#}");
    let cpu = t["cpu_s"].as_f64().unwrap();
    let bracket = after - before;
    let slack = 2.0 / tick_hz() + 0.05 * bracket;
    assert!(cpu > 0.0, "unbound answered 40000 queries on no CPU? {t:#}");
    assert!((cpu - bracket).abs() <= slack, "target CPU {cpu} s, /proc around the run {bracket} s");
    // Per second too: the seconds' readings add up to at most the total.
    let seconds: Vec<f64> = v["series"].as_array().unwrap().iter().filter_map(|r| r["target_cpu_s"].as_f64()).collect();
    assert!(!seconds.is_empty(), "series carry target_cpu_s:\n{:#}", v["series"]);
    assert!(seconds.iter().sum::<f64>() <= cpu + 1e-6, "{seconds:?} vs {cpu}");
    let per = t["cpu_us_per_answer"].as_f64().unwrap();
    assert!((per - cpu * 1e6 / 40000.0).abs() < 1e-6 * per.max(1.0), "{t:#}");
    assert!(
        r.stdout.lines().any(|l| l.starts_with("target cpu") && l.contains(&format!("(pid {pid})"))),
        "the summary shows the target's CPU:\n{}",
        r.stdout
    );
}
