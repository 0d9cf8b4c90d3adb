//! Simulated clients and their profiles, observed on the wire (issue 4): the `browser`
//! opens parallel connections at start and switches to short sequential connections under
//! load; the `forwarder` holds one connection per client while busy and closes it after its
//! idle period; the `stub` asks truncated answers again over TCP; a mixture reports each
//! group, and the groups add up to the run.

mod common;

use std::thread;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn show(v: &Value) -> String {
    format!("totals:\n{:#}\nconnections:\n{:#}\nevents:\n{:#}", v["totals"], v["connections"], v["events"])
}

fn complete(v: &Value) {
    check_accounting(v);
    assert_eq!(v["status"], "complete", "{v:#}");
}

/// 20 browsers at 0.5 qps: three connections each in the first second. At 5 qps (busy):
/// connections of a few queries each, closed by the client and replaced.
#[test]
fn browser_parallel_at_start_then_short_connections() {
    let s = Server::start_encrypted(&["-T", "1"]);
    let url = s.url("https");
    let common = ["--ca", s.ca_str(), "--clients", "20", "--profile", "browser", "-l", "3s"];

    let light = run_volley(&[&[url.as_str(), "--client-rate", "0.5"][..], &common[..]].concat());
    let v = light.ok();
    complete(v);
    let first = v["series"][0]["connections"]["opened"].as_u64().unwrap_or(0);
    assert!(first >= 3 * 20, "three parallel connections per client in the first second, got {first}:\n{}", show(v));
    assert_eq!(total(v, "failed"), 0, "{}", show(v));

    let busy = run_volley(&[&[url.as_str(), "--client-rate", "5"][..], &common[..]].concat());
    let v = busy.ok();
    complete(v);
    let lifetime = conn_map(v, &["closed"], "client_lifetime");
    assert!(lifetime >= 2 * 20, "short connections closed by the clients, many per client:\n{}", show(v));
    // Each connection ended by its lifetime is replaced while the client still sends.
    assert!(conn_total(v, "opened") > 3 * 20, "new connections opened in sequence:\n{}", show(v));
    assert_eq!(total(v, "failed"), 0, "{}", show(v));
}

/// The built-in forwarder: one connection per client for the whole busy run (volley's count
/// and `ss` on the responder's port).
#[test]
fn forwarder_holds_one_connection_per_client() {
    let s = Server::start_with(&["-T", "1"]);
    let port = s.tcp_addr().port();
    let run = BackgroundRun::start(&[
        &s.tcp_url(),
        "--clients",
        "5",
        "--client-rate",
        "2",
        "--profile",
        "forwarder",
        "-l",
        "3s",
    ]);
    thread::sleep(Duration::from_millis(1500));
    let on_wire = ss_established(port);
    let v = run.finish();
    complete(&v);
    assert_eq!(on_wire, 5, "ss: one established connection per client");
    assert_eq!(conn_total(&v, "opened"), 5, "{}", show(&v));
    assert_eq!(conn_map(&v, &["closed"], "client_end"), 5, "{}", show(&v));
}

/// A forwarder whose idle period (300 ms) is shorter than the gap between its queries (1 s):
/// its connection closes after each query, and the next query opens another.
#[test]
fn forwarder_closes_after_its_idle_period() {
    let s = Server::start_with(&["-T", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("fwd.toml");
    std::fs::write(
        &profile,
        "name = \"forwarder-300ms\"\nconnections = 1\nconnect_at_start = false\n\n[light]\nidle_timeout = \"300ms\"\n",
    )
    .unwrap();
    let r = run_volley(&[
        &s.tcp_url(),
        "--clients",
        "5",
        "--client-rate",
        "1",
        "--profile",
        profile.to_str().unwrap(),
        "-l",
        "3s",
    ]);
    let v = r.ok();
    complete(v);
    assert_eq!(total(v, "failed"), 0, "{}", show(v));
    assert!(conn_map(v, &["closed"], "client_idle") >= 5, "closed after the idle period:\n{}", show(v));
    assert_eq!(conn_total(v, "opened"), total(v, "issued"), "every query finds its connection closed:\n{}", show(v));
}

/// Each simulated client keeps its own TLS sessions: over DoT, 5 forwarders whose connections
/// close after every query resume every reconnection, but each client's first connection is a
/// full handshake (it has no session of another client to resume): opened − resumed = 5.
#[test]
fn each_client_resumes_only_its_own_sessions() {
    let s = Server::start_encrypted(&["-T", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("fwd.toml");
    std::fs::write(
        &profile,
        "name = \"forwarder-200ms\"\nconnections = 1\nconnect_at_start = false\n\n[light]\nidle_timeout = \"200ms\"\n",
    )
    .unwrap();
    let url = s.url("tls");
    let r = run_volley(&[
        &url,
        "--ca",
        s.ca_str(),
        "--clients",
        "5",
        "--client-rate",
        "2",
        "--profile",
        profile.to_str().unwrap(),
        "-l",
        "3s",
        "-T",
        "1",
    ]);
    let v = r.ok();
    complete(v);
    assert_eq!(total(v, "failed"), 0, "{}", show(v));
    let (opened, resumed) = (conn_total(v, "opened"), conn_total(v, "resumed"));
    assert!(opened >= 15, "reconnections after each idle close:\n{}", show(v));
    assert_eq!(opened - resumed, 5, "one full handshake per client, the rest resumed:\n{}", show(v));
}

/// Stub clients over UDP ask for a 2000-octet TXT (TC=1 over UDP) and ask again over TCP to
/// the same port: one retry per truncated answer, one TCP connection per retry; each query's
/// fate is its TCP answer.
#[test]
fn stub_retries_truncated_answers_over_tcp() {
    let port = free_port().to_string();
    let mut s = Server::start_with(&["-T", "1", "--udp-port", &port, "--tcp-port", &port]);
    assert_eq!(s.udp_addr().port(), s.tcp_addr().port());
    let r = run_volley(&[
        &s.udp_url(),
        "--clients",
        "5",
        "--client-rate",
        "2",
        "--profile",
        "stub",
        "--name",
        "size-2000.test",
        "--qtype",
        "TXT",
        "-l",
        "2s",
    ]);
    let stats = s.terminate();
    let v = r.ok();
    complete(v);
    let truncated = total(v, "truncated");
    let retries = v["events"]["tcp_retries_after_truncation"].as_u64().unwrap_or(0);
    assert!(truncated >= 5, "{}", show(v));
    assert_eq!(retries, truncated, "one TCP retry per truncated answer:\n{}", show(v));
    assert_eq!(conn_total(v, "opened"), retries, "one connection per retry:\n{}", show(v));
    assert_eq!(total(v, "failed"), 0, "{}", show(v));
    // The retry is its query's own send, not a query of its own: its TCP answer is the fate.
    assert_eq!(total(v, "answered"), total(v, "issued"), "{}", show(v));
    assert_eq!(v["totals"]["tries"]["2"].as_u64(), Some(retries), "{}", show(v));
    // The responder saw those connections on its TCP side of the same port (the probe went
    // over UDP).
    assert_eq!(serve_stat(&stats, "tcp_connections"), retries, "{stats}");
}

/// `--mix 60:stub@udp --mix 40:forwarder@tcp --clients 100`: two groups of 60 and 40
/// clients, each balanced, adding up to the run's totals.
#[test]
fn mixture_groups_add_up() {
    let s = Server::start_with(&["-T", "1"]);
    let stub = format!("60:stub@{}", s.udp_url());
    let fwd = format!("40:forwarder@{}", s.tcp_url());
    let r = run_volley(&["--mix", &stub, "--mix", &fwd, "--clients", "100", "--client-rate", "2", "-l", "2s"]);
    let v = r.ok();
    complete(v);
    let groups = v["groups"].as_array().unwrap_or_else(|| panic!("no groups:\n{v:#}"));
    assert_eq!(groups.len(), 2, "{:#}", v["groups"]);
    let clients: Vec<u64> = groups.iter().map(|g| g["clients"].as_u64().unwrap()).collect();
    assert_eq!(clients, [60, 40]);
    for key in ["issued", "sent", "answered", "timed_out", "failed", "unsent", "in_flight"] {
        let sum: u64 = groups.iter().map(|g| g["totals"][key].as_u64().unwrap()).sum();
        assert_eq!(sum, total(v, key), "groups' {key} add up to the run's");
    }
    for g in groups {
        let t = &g["totals"];
        let n = |k: &str| t[k].as_u64().unwrap();
        assert_eq!(
            n("issued"),
            n("answered") + n("timed_out") + n("failed") + n("unsent") + n("in_flight"),
            "{}: {t:#}",
            g["name"]
        );
        assert!(n("answered") > 0, "{}: {t:#}", g["name"]);
    }
    assert_eq!(total(v, "issued"), 400, "100 clients x 2 qps x 2 s:\n{}", show(v));
}

/// A pcap of one client's (10.0.0.1) UDP queries to 10.0.0.53:53 at `times` (s).
fn capture_of(times: &[f64]) -> Vec<u8> {
    let packets: Vec<([u8; 4], f64)> = times.iter().map(|&t| ([10, 0, 0, 1], t)).collect();
    query_capture(&packets, "dyn.test")
}

/// A browser's connections follow its own traffic: a replayed client that sends slowly (light:
/// one connection reused) and then fast (above its light rate of 1 qps) switches to short
/// connections of four queries each, opened and closed in sequence, during the run.
#[test]
fn browser_switches_to_short_connections_when_its_traffic_rises() {
    let s = Server::start_encrypted(&["-T", "1"]);
    let dir = tempfile::tempdir().unwrap();
    // Three queries 1.5 s apart, then sixteen 100 ms apart.
    let mut times: Vec<f64> = (0..3).map(|i| i as f64 * 1.5).collect();
    times.extend((1..=16).map(|i| 3.0 + i as f64 * 0.1));
    let pcap = dir.path().join("dyn.pcap");
    std::fs::write(&pcap, capture_of(&times)).unwrap();
    let clients = dir.path().join("dyn.clients");
    let r = run_cmd(
        std::process::Command::new(volley()).arg("pcap").arg(&pcap).arg("-o").arg(&clients),
        Duration::from_secs(30),
    );
    assert_eq!(r.status.code(), Some(0), "volley pcap: {}", r.stderr);
    let url = s.url("https");
    let r = run_volley(&[
        &url,
        "--ca",
        s.ca_str(),
        "--replay",
        clients.to_str().unwrap(),
        "--profile",
        "browser",
        "-l",
        "6s",
        "-T",
        "1",
    ]);
    let v = r.ok();
    complete(v);
    assert_eq!(total(v, "answered"), 19, "{}", show(v));
    assert_eq!(v["events"]["profile_busy"], 1, "one switch to the busy policy:\n{}", show(v));
    // Light: the three connections opened at start, one of them carrying the slow queries.
    // Busy: queries 4.. in connections of four (the connection in use ends as it switches).
    let lifetime = conn_map(v, &["closed"], "client_lifetime");
    assert!(lifetime >= 3, "short connections closed in sequence once busy:\n{}", show(v));
    assert!(conn_total(v, "opened") > 3, "new connections after the three of the start:\n{}", show(v));
}

/// Groups of a mixture may send at their own rates (WEIGHT:PROFILE:QPS@URL): the totals and
/// each group's queries follow them.
#[test]
fn mix_groups_at_their_own_rates() {
    let s = Server::start_with(&["-T", "1"]);
    let udp = format!("50:stub:1@{}", s.udp_url());
    let tcp = format!("50:forwarder:4@{}", s.tcp_url());
    let r = run_volley(&["--mix", &udp, "--mix", &tcp, "--clients", "4", "-l", "3s", "-T", "1"]);
    let v = r.ok();
    complete(v);
    assert_eq!(v["load"]["rate"].as_f64(), Some(10.0), "2 x 1 + 2 x 4 qps:\n{:#}", v["load"]);
    assert!(v["load"]["client_rate"].is_null(), "the groups differ:\n{:#}", v["load"]);
    let groups = v["groups"].as_array().unwrap_or_else(|| panic!("groups:\n{v:#}"));
    let sent: Vec<u64> = groups.iter().map(|g| g["totals"]["issued"].as_u64().unwrap_or(0)).collect();
    assert_eq!(sent.len(), 2, "{groups:#?}");
    // 3 s at 2 and at 8 queries per second (a client's first query falls within its first
    // interval, so a count may be one off per client).
    assert!((4..=8).contains(&sent[0]) && (20..=28).contains(&sent[1]), "{sent:?}");
}
