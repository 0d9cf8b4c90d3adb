//! `volley run` against `volley serve`: closed and open loops, every answer kind, query files.

mod common;

use common::*;

const TRANSPORTS: [&str; 2] = ["udp", "tcp"];

#[test]
fn closed_loop_every_query_answered() {
    let s = Server::start();
    for t in TRANSPORTS {
        let url = s.url(t);
        let r = run_volley(&[&url, "--name", "www.example.test", "-c", "10", "-n", "2000"]);
        let v = r.ok();
        check_accounting(v);
        assert_eq!(v["status"], "complete");
        assert_eq!(v["target"]["transport"], t);
        assert_eq!(total(v, "issued"), 2000, "{t}: -n 2000 sends 2000:\n{:#}", v["totals"]);
        assert_eq!(total(v, "answered"), 2000, "{t}: all answered:\n{:#}", v["totals"]);
        assert_eq!(rcode(v, "NOERROR"), 2000, "{t}:\n{:#}", v["totals"]);
        assert_eq!(total(v, "in_flight"), 0);
        assert_eq!(total(v, "truncated"), 0);
        assert_eq!(v["latency"]["count"].as_u64(), Some(2000), "{t}: one latency sample per answer");
        assert!(!v["series"].as_array().unwrap().is_empty(), "{t}: a series entry at least");
    }
}

#[test]
fn open_loop_at_a_rate() {
    let s = Server::start();
    for t in TRANSPORTS {
        let url = s.url(t);
        let r = run_volley(&[&url, "--name", "www.example.test", "--rate", "2000", "-l", "2"]);
        let v = r.ok();
        check_accounting(v);
        assert_eq!(v["status"], "complete");
        let sent = total(v, "issued");
        let answered = total(v, "answered");
        assert!(answered > 0, "{t}:\n{:#}", v["totals"]);
        assert_eq!(rcode(v, "NOERROR"), answered, "{t}:\n{:#}", v["totals"]);
        assert_eq!(total(v, "timed_out"), 0, "{t}:\n{:#}", v["totals"]);
        assert_eq!(total(v, "failed"), 0, "{t}:\n{:#}", v["totals"]);
        // Open loop: never more than the schedule (2000/s for 2 s), whatever the machine.
        assert!(sent <= 4000 + 40, "{t}: sent {sent} > 4000 scheduled");
        assert!(!v["series"].as_array().unwrap().is_empty(), "{t}: a series entry at least");
    }
}

/// The steal ticks of all CPUs (the `cpu` line's eighth value) and the number of CPUs.
fn proc_steal() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let steal = stat.lines().next().unwrap().split_whitespace().nth(8).unwrap().parse().unwrap();
    let cpus =
        stat.lines().filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit)).count();
    (steal, cpus as u64)
}

/// The machine's steal time over the run (a VM's hypervisor taking its CPUs): within what
/// /proc/stat counted around the run, as a share of all CPUs' time over it, and a warning
/// exactly when that share is above 1 %.
#[test]
fn the_hosts_steal_time_is_in_the_results() {
    let s = Server::start();
    let (before, cpus) = proc_steal();
    let r = run_volley(&[&s.url("udp"), "--name", "www.example.test", "--rate", "1000", "-l", "2"]);
    let (after, _) = proc_steal();
    let v = r.ok();
    let h = &v["host"];
    assert_eq!(h["cpus"].as_u64(), Some(cpus), "{h:#}");
    let steal = h["steal_s"].as_f64().unwrap();
    assert!(
        steal >= 0.0 && steal <= (after - before) as f64 / 100.0 + 1e-9,
        "{steal} s, /proc around it {} ticks",
        after - before
    );
    let elapsed = v["elapsed_s"].as_f64().unwrap();
    let share = h["steal_share"].as_f64().unwrap();
    // Its own wall time spans the run's, within the clock reads around it.
    assert!((share * elapsed * cpus as f64 - steal).abs() <= 0.05 * steal + 1e-9, "{h:#}, elapsed {elapsed}");
    let warned = v["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("steal"));
    assert_eq!(warned, share > 0.01, "{h:#}\n{:#}", v["warnings"]);
}

/// Runs `-n COUNT -c 10` for NAME/QTYPE over `t` and checks the accounting.
fn run_name(s: &Server, t: &str, name: &str, qtype: &str, count: u64) -> serde_json::Value {
    let url = s.url(t);
    let n = count.to_string();
    let r = run_volley(&[&url, "--name", name, "--qtype", qtype, "-c", "10", "-n", &n, "-t", "5s"]);
    let v = r.ok().clone();
    check_accounting(&v);
    assert_eq!(v["status"], "complete");
    assert_eq!(total(&v, "issued"), count, "{t} {name}:\n{:#}", v["totals"]);
    assert_eq!(total(&v, "answered"), count, "{t} {name}: all answered:\n{:#}", v["totals"]);
    v
}

#[test]
fn nxdomain_counted() {
    let s = Server::start();
    for t in TRANSPORTS {
        let v = run_name(&s, t, "x.nx.test", "A", 500);
        assert_eq!(rcode(&v, "NXDOMAIN"), 500, "{t}:\n{:#}", v["totals"]);
        assert_eq!(rcode(&v, "NOERROR"), 0, "{t}: zero entries are omitted or 0");
    }
}

#[test]
fn servfail_counted() {
    let s = Server::start();
    for t in TRANSPORTS {
        let v = run_name(&s, t, "x.fail.test", "A", 500);
        assert_eq!(rcode(&v, "SERVFAIL"), 500, "{t}:\n{:#}", v["totals"]);
        assert_eq!(rcode(&v, "NOERROR"), 0);
    }
}

#[test]
fn nodata_is_noerror() {
    let s = Server::start();
    for t in TRANSPORTS {
        let v = run_name(&s, t, "www.example.test", "MX", 300);
        assert_eq!(rcode(&v, "NOERROR"), 300, "{t}:\n{:#}", v["totals"]);
    }
}

#[test]
fn large_answers_truncated_over_udp_not_tcp() {
    let s = Server::start();
    let v = run_name(&s, "udp", "size-3000.test", "TXT", 200);
    assert_eq!(total(&v, "truncated"), 200, "every UDP answer of 3000 octets is truncated:\n{:#}", v["totals"]);
    let v = run_name(&s, "tcp", "size-3000.test", "TXT", 200);
    assert_eq!(total(&v, "truncated"), 0, "TCP carries the whole answer:\n{:#}", v["totals"]);
    assert_eq!(rcode(&v, "NOERROR"), 200);
}

#[test]
fn delayed_answers_are_not_early() {
    let s = Server::start();
    for t in TRANSPORTS {
        let v = run_name(&s, t, "delay-200ms.test", "A", 20);
        let min = v["latency"]["min_ns"].as_u64().unwrap();
        // A lower bound set by the responder's own delay, not a speed requirement. The
        // latency histogram keeps 3 significant digits: at 200 ms a value is known to within
        // 2^17 ns (131 µs), and `min_ns` is its bucket's lowest value (199,884,800 ns read
        // for an answer that came in that bucket), so the bound allows one bucket below.
        assert!(min >= 200_000_000 - 131_072, "{t}: an answer delayed by 200 ms arrived after {min} ns");
    }
}

#[test]
fn query_file_mixing_types() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let file = write_queries(
        dir.path(),
        "mixed.txt",
        &[
            "# comment",
            "www.example.test A",
            "www.example.test AAAA",
            "",
            "; another comment",
            "www.example.test TXT",
            "www.example.test MX",
            "x.nx.test A",
            "x.fail.test AAAA",
        ],
    );
    let file = file.to_str().unwrap();
    for t in TRANSPORTS {
        let url = s.url(t);
        let r = run_volley(&[&url, "-d", file, "-c", "10", "-n", "1200"]);
        let v = r.ok();
        check_accounting(v);
        assert_eq!(total(v, "issued"), 1200);
        assert_eq!(total(v, "answered"), 1200, "{t}:\n{:#}", v["totals"]);
        assert!(rcode(v, "NOERROR") > 0, "{t}:\n{:#}", v["totals"]);
        assert!(rcode(v, "NXDOMAIN") > 0, "{t}:\n{:#}", v["totals"]);
        assert!(rcode(v, "SERVFAIL") > 0, "{t}:\n{:#}", v["totals"]);
        assert_eq!(
            rcode(v, "NOERROR") + rcode(v, "NXDOMAIN") + rcode(v, "SERVFAIL"),
            1200,
            "{t}: no other rcode:\n{:#}",
            v["totals"]
        );
    }
}

#[test]
fn random_names_under_a_suffix() {
    let s = Server::start();
    let r = run_volley(&[&s.udp_url(), "--random-under", "nx.test", "-c", "10", "-n", "500"]);
    let v = r.ok();
    check_accounting(v);
    assert_eq!(rcode(v, "NXDOMAIN"), 500, "names under nx.test are NXDOMAIN:\n{:#}", v["totals"]);
}

#[test]
fn json_summary_on_stdout() {
    let s = Server::start();
    let r = run_volley(&[&s.udp_url(), "--name", "www.example.test", "-n", "100", "-c", "5", "--format", "json"]);
    let file = r.ok().clone();
    let stdout: serde_json::Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("--format json prints JSON on stdout: {e}\n{}", r.stdout));
    assert!(stdout.is_object(), "a JSON object on stdout: {stdout}");
    if let Some(totals) = stdout.get("totals") {
        assert_eq!(totals, &file["totals"], "stdout and --output agree");
    }
}
