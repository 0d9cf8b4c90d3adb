//! A run split into parts (`--part`, `--coordinator`, `volley coordinate`): parts as separate
//! processes, each on a simulated host of its own (a network namespace with its own address,
//! a veth pair to a bridge), the coordinator and the responder on hosts of their own. The
//! merged results must be those of one process making the same run; a part killed, or the
//! coordinator killed, must leave results that say so, or that merge later.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Simulated hosts: network namespaces joined by veth pairs to a bridge in a hub namespace,
/// addresses in 198.18.0.0/24 (RFC 2544's benchmarking range; nothing leaves the namespaces).
/// Removed (with their links) when dropped.
struct Hosts {
    prefix: String,
    namespaces: Vec<String>,
}

static NETS: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) {
    let out = Command::new(require("ip")).args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

impl Hosts {
    fn new() -> Hosts {
        let prefix = format!("vs{:x}{}", std::process::id() & 0xffff, NETS.fetch_add(1, Ordering::Relaxed));
        let hub = format!("{prefix}h");
        ip(&["netns", "add", &hub]);
        let h = Hosts { prefix, namespaces: vec![hub.clone()] };
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &hub, "link", "set", "br0", "up"]);
        ip(&["-n", &hub, "link", "set", "lo", "up"]);
        h
    }

    /// A host of its own at 198.18.0.`last`: its namespace's name.
    fn host(&mut self, last: u8) -> String {
        let ns = format!("{}n{last}", self.prefix);
        let (a, b) = (format!("{}a{last}", self.prefix), format!("{}b{last}", self.prefix));
        let hub = self.namespaces[0].clone();
        ip(&["netns", "add", &ns]);
        self.namespaces.push(ns.clone());
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        ip(&["link", "set", &a, "netns", &ns]);
        ip(&["link", "set", &b, "netns", &hub]);
        ip(&["-n", &hub, "link", "set", &b, "master", "br0"]);
        ip(&["-n", &hub, "link", "set", &b, "up"]);
        ip(&["-n", &ns, "addr", "add", &format!("198.18.0.{last}/24"), "dev", &a]);
        ip(&["-n", &ns, "link", "set", &a, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ns
    }

    /// volley on host `ns`.
    fn volley(ns: &str) -> Command {
        let mut c = Command::new(require("ip"));
        c.args(["netns", "exec", ns]).arg(volley());
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().rev() {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A running `volley coordinate`, its standard error read line by line.
struct Coord {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    addr: String,
    output: std::path::PathBuf,
}

impl Coord {
    fn start(mut cmd: Command, listen: &str, parts: u32, output: &std::path::Path, extra: &[&str]) -> Coord {
        cmd.args(["coordinate", "--parts", &parts.to_string(), "--listen", listen, "-o"])
            .arg(output)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start volley coordinate");
        let err = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let mut c = Coord { child, lines: rx, seen: Vec::new(), addr: String::new(), output: output.to_path_buf() };
        let line = c.wait_for("listening on");
        c.addr = line.split("listening on ").nth(1).unwrap().split(';').next().unwrap().trim().to_string();
        c
    }

    /// Waits (bounded) for a line containing `what`.
    fn wait_for(&mut self, what: &str) -> String {
        let deadline = Instant::now() + STARTUP_WAIT;
        if let Some(l) = self.seen.iter().find(|l| l.contains(what)) {
            return l.clone();
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(what) {
                        return l;
                    }
                }
                Err(_) => panic!("coordinator: no line with '{what}'; so far:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// Waits for its end: its exit code, everything it said, its merged results.
    fn finish(mut self) -> (Option<i32>, String, Option<Value>) {
        let status = wait_bounded(&mut self.child, RUN_WAIT).expect("coordinator ends");
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(l);
        }
        (status.code(), self.seen.join("\n"), read_results(&self.output))
    }
}

/// Starts a part: `CMD run ARGS... --progress never -o OUT`.
fn part(mut cmd: Command, args: &[&str], out: &std::path::Path) -> Child {
    cmd.arg("run")
        .args(args)
        .args(["--progress", "never", "-q", "-o"])
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a part")
}

fn finish_part(mut c: Child) -> (Option<i32>, String) {
    let status = wait_bounded(&mut c, RUN_WAIT).expect("part ends");
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut err);
    (status.code(), err)
}

/// A split limit search: one part per command (`volley` on its host), each `volley limit
/// TARGET --parts N --coordinator ADDR ARGS`; every part and the coordinator end with 0.
/// Returns what the coordinator said and the search's file.
fn split_search(cmds: Vec<Command>, target: &str, coord: Coord, args: &[&str]) -> (String, Value) {
    let n = cmds.len().to_string();
    let children: Vec<Child> = cmds
        .into_iter()
        .map(|mut c| {
            c.args(["limit", target, "--parts", &n, "--coordinator", &coord.addr])
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start a part")
        })
        .collect();
    for c in children {
        let (code, err) = finish_part(c);
        assert_eq!(code, Some(0), "N={n}: {err}");
    }
    let (code, said, doc) = coord.finish();
    assert_eq!(code, Some(0), "N={n}:\n{said}");
    (said, doc.expect("the search's file"))
}

fn rows(v: &Value, key: &str) -> Vec<u64> {
    v["series"].as_array().unwrap().iter().map(|r| r[key].as_u64().unwrap()).collect()
}

/// Per-second rows that must match: the same sum, and by the end of every second the same
/// count within `slack` (a query handed over a little late at a second's edge counts in the
/// next one, in a split run as in a single one).
fn assert_rows_match(merged: &[u64], single: &[u64], slack: u64, what: &str) {
    assert_eq!(merged.iter().sum::<u64>(), single.iter().sum::<u64>(), "{what}: merged {merged:?}, single {single:?}");
    let (mut a, mut b) = (0u64, 0u64);
    for i in 0..merged.len().max(single.len()) {
        a += merged.get(i).copied().unwrap_or(0);
        b += single.get(i).copied().unwrap_or(0);
        assert!(a.abs_diff(b) <= slack, "{what}: merged rows {merged:?}, single {single:?}");
    }
}

/// Whether this process may raise a thread to real-time priority (CAP_SYS_NICE, bit 23 of the
/// effective capabilities), as the parts' start wait does where it may.
fn may_use_real_time() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status.lines().find_map(|l| l.strip_prefix("CapEff:")).unwrap_or("0");
    u64::from_str_radix(caps.trim(), 16).unwrap_or(0) & (1 << 23) != 0
}

const RATE: u64 = 1_400;
const COUNT: u64 = 4_200;

/// N parts, each on its own simulated host, make the run one process makes: the same queries
/// sent and answered, the same per-second rows, one histogram of every answer; the start skew
/// and the clock offsets are recorded.
#[test]
fn parts_on_separate_hosts_merge_into_the_single_run() {
    let mut hosts = Hosts::new();
    let responder_ns = hosts.host(2);
    let coord_ns = hosts.host(3);
    let server = Server::start_via(Hosts::volley(&responder_ns), &["-l", "198.18.0.2"]);
    let target = format!("udp://{}", server.udp_addr());
    let dir = tempfile::tempdir().unwrap();
    let load = ["-Q", "1400", "-n", "4200", "-T", "1", "--name", "www.example.test"];
    let parts_ns: Vec<String> = (0..7u8).map(|i| hosts.host(10 + i)).collect();

    // One process making the whole run, from a host of its own.
    let single_out = dir.path().join("single.json");
    let mut args = vec![target.as_str()];
    args.extend(load);
    let (code, err) = finish_part(part(Hosts::volley(&parts_ns[0]), &args, &single_out));
    assert_eq!(code, Some(0), "{err}");
    let single = read_results(&single_out).unwrap();
    assert_eq!(total(&single, "answered"), COUNT, "{single:#}");

    for n in [1u32, 2, 3, 4, 7] {
        let merged_out = dir.path().join(format!("merged-{n}.json"));
        let coord = Coord::start(Hosts::volley(&coord_ns), "198.18.0.3:0", n, &merged_out, &["--wait", "60s"]);
        let parts_arg = n.to_string();
        let mut children = Vec::new();
        for (i, ns) in parts_ns.iter().take(n as usize).enumerate() {
            let mut args = vec![target.as_str(), "--parts", &parts_arg, "--coordinator", &coord.addr];
            args.extend(load);
            children.push(part(Hosts::volley(ns), &args, &dir.path().join(format!("part-{n}-{i}.json"))));
        }
        for c in children {
            let (code, err) = finish_part(c);
            assert_eq!(code, Some(0), "N={n}: {err}");
        }
        let (code, said, merged) = coord.finish();
        assert_eq!(code, Some(0), "N={n}:\n{said}");
        let merged = merged.expect("merged results");
        check_accounting(&merged);
        for key in ["issued", "sent", "answered"] {
            assert_eq!(total(&merged, key), total(&single, key), "N={n} {key}");
        }
        assert_eq!(total(&merged, "timed_out"), 0);
        // The merged histogram holds every answer, once.
        assert_eq!(merged["latency"]["count"].as_u64(), Some(COUNT), "N={n}");
        assert_eq!(merged["load"]["count"].as_u64(), Some(COUNT), "N={n}");
        assert!((merged["load"]["rate"].as_f64().unwrap() - RATE as f64).abs() < 1e-6, "N={n}");
        assert_rows_match(&rows(&merged, "issued"), &rows(&single, "issued"), RATE / 50, &format!("N={n} issued"));
        assert_rows_match(&rows(&merged, "sent"), &rows(&single, "sent"), RATE / 50, &format!("N={n} sent"));
        let scale = &merged["scale"];
        assert_eq!(scale["parts"].as_u64(), Some(u64::from(n)));
        assert_eq!(scale["complete"].as_bool(), Some(true), "{scale:#}");
        let list = scale["part_list"].as_array().unwrap();
        assert_eq!(list.len(), n as usize);
        let mut peers: Vec<&str> =
            list.iter().map(|p| p["peer"].as_str().unwrap().split(':').next().unwrap()).collect();
        peers.sort_unstable();
        peers.dedup();
        assert_eq!(peers.len(), n as usize, "each part from its own host: {scale:#}");
        for p in list {
            assert_eq!(p["status"], "merged");
            assert!(p["clock_offset_ns"].is_i64() && p["rtt_ns"].is_u64(), "{p:#}");
        }
        let skew = scale["start_skew_ns"].as_u64().expect("start skew measured");
        // Where the parts may wait for the start at real-time priority (CAP_SYS_NICE: root
        // here), under 1 ms however busy the machine (docs/scale-out.md, "The start wait": 7
        // parts read 0.03 ms at a load average of 12); else bounded only against a start that
        // did not synchronise at all (parts started by their own clocks would be seconds apart).
        eprintln!("N={n}: start skew {:.3} ms", skew as f64 / 1e6);
        let bound = if may_use_real_time() { 1_000_000 } else { 100_000_000 };
        assert!(skew < bound, "N={n}: start skew {skew} ns:\n{said}");
        // Each part's own file is complete and names its part.
        for i in 0..n {
            let p = read_results(&dir.path().join(format!("part-{n}-{i}.json"))).unwrap();
            assert_eq!(p["part"]["count"].as_u64(), Some(u64::from(n)));
            check_accounting(&p);
        }
    }
    drop(server);
}

/// A loopback address of its own for each test, so that concurrent tests never meet.
fn lo(last: u8) -> String {
    format!("127.0.{}.{last}", 40 + (std::process::id() % 200) as u8)
}

/// A part killed mid-run: the merge is incomplete, names it with its share, and holds what the
/// others measured.
#[test]
fn a_part_killed_mid_run_is_named_in_an_incomplete_merge() {
    let server = Server::start();
    let target = server.udp_url();
    let dir = tempfile::tempdir().unwrap();
    let merged_out = dir.path().join("merged.json");
    let mut coord = Coord::start(Command::new(volley()), &format!("{}:0", lo(1)), 3, &merged_out, &["--silence", "5s"]);
    let mut children = Vec::new();
    for i in 0..3 {
        let part_arg = format!("{i}/3");
        let args =
            [target.as_str(), "--part", &part_arg, "--coordinator", &coord.addr, "-Q", "600", "-l", "4s", "-T", "1"];
        children.push(part(Command::new(volley()), &args, &dir.path().join(format!("p{i}.json"))));
    }
    coord.wait_for("second    1:");
    let mut victim = children.remove(1);
    victim.kill().unwrap();
    let _ = victim.wait();
    for c in children {
        assert_eq!(finish_part(c).0, Some(0));
    }
    let (code, said, merged) = coord.finish();
    assert_eq!(code, Some(3), "incomplete: exit 3\n{said}");
    assert!(said.contains("part 1 (33.3% of the load) missing: lost"), "{said}");
    let merged = merged.expect("the other parts' results merged");
    let scale = &merged["scale"];
    assert_eq!(scale["complete"].as_bool(), Some(false));
    let p1 = &scale["part_list"][1];
    assert_eq!(p1["status"], "lost", "{scale:#}");
    assert!((scale["missing_share"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-9);
    let w = merged["warnings"].as_array().unwrap();
    assert!(w.iter().any(|w| w.as_str().unwrap().starts_with("incomplete: part 1 of 3 (33.3% of the load)")), "{w:?}");
    // Everything the other two measured, nothing of the killed one.
    let p0 = read_results(&dir.path().join("p0.json")).unwrap();
    let p2 = read_results(&dir.path().join("p2.json")).unwrap();
    assert!(read_results(&dir.path().join("p1.json")).is_none());
    for key in ["issued", "sent", "answered"] {
        assert_eq!(total(&merged, key), total(&p0, key) + total(&p2, key), "{key}");
    }
    check_accounting(&merged);
}

/// A part process stopped (SIGSTOP) and so silent on a connection that stays open; killed
/// when dropped unless it was taken back.
struct Stopped(Option<Child>);

fn signal(c: &Child, sig: libc::c_int) {
    let rc = unsafe { libc::kill(c.id() as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill({}, {sig}): {}", c.id(), std::io::Error::last_os_error());
}

impl Stopped {
    fn stop(c: Child) -> Stopped {
        signal(&c, libc::SIGSTOP);
        Stopped(Some(c))
    }

    fn resume(mut self) -> Child {
        let c = self.0.take().unwrap();
        signal(&c, libc::SIGCONT);
        c
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A part that joined, said ready and started, then falls silent with its connection open (its
/// process stopped): the coordinator's line a second goes on without it and names it once it
/// has not been heard from for 2 s; after `--silence` it is given up, and the merge of the
/// other part's results is marked incomplete, naming it lost for its silence (exit 3). Resumed,
/// the part finishes, finds nobody to hand its results to, and keeps them in its own file.
#[test]
fn a_part_that_falls_silent_is_named_live_then_given_up() {
    let server = Server::start();
    let target = server.udp_url();
    let dir = tempfile::tempdir().unwrap();
    let merged_out = dir.path().join("merged.json");
    let mut coord = Coord::start(Command::new(volley()), &format!("{}:0", lo(7)), 2, &merged_out, &["--silence", "4s"]);
    let mut children = Vec::new();
    for i in 0..2 {
        let part_arg = format!("{i}/2");
        let args =
            [target.as_str(), "--part", &part_arg, "--coordinator", &coord.addr, "-Q", "400", "-l", "12s", "-T", "1"];
        children.push(part(Command::new(volley()), &args, &dir.path().join(format!("s{i}.json"))));
    }
    let line = coord.wait_for("second    1:");
    assert!(line.ends_with("(2 parts reported, 2 running)"), "{line}");
    let silent = Stopped::stop(children.pop().unwrap());
    let line = coord.wait_for("not heard from for 2 s");
    assert!(line.ends_with("(1 parts reported, 2 running; not heard from for 2 s: parts [1])"), "{line}");
    let (code, err) = finish_part(children.pop().unwrap());
    assert_eq!(code, Some(0), "{err}");
    let (code, said, merged) = coord.finish();
    assert_eq!(code, Some(3), "incomplete: exit 3\n{said}");
    assert!(said.contains("part 1 (50.0% of the load) missing: lost (silent for 4 s)"), "{said}");
    let merged = merged.expect("the other part's results merged");
    let scale = &merged["scale"];
    assert_eq!(scale["complete"].as_bool(), Some(false), "{scale:#}");
    assert_eq!(scale["part_list"][0]["status"], "merged", "{scale:#}");
    assert_eq!(scale["part_list"][1]["status"], "lost", "{scale:#}");
    assert_eq!(scale["part_list"][1]["reason"], "silent for 4 s", "{scale:#}");
    assert!((scale["missing_share"].as_f64().unwrap() - 0.5).abs() < 1e-9);
    let w = merged["warnings"].as_array().unwrap();
    assert!(
        w.iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("incomplete: part 1 of 2 (50.0% of the load) is missing (lost: silent for 4 s)")),
        "{w:?}"
    );
    check_accounting(&merged);
    let p0 = read_results(&dir.path().join("s0.json")).unwrap();
    for key in ["issued", "sent", "answered"] {
        assert_eq!(total(&merged, key), total(&p0, key), "{key}: the merge is part 0's alone");
    }
    let (code, err) = finish_part(silent.resume());
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("results not handed in"), "{err}");
    let p1 = read_results(&dir.path().join("s1.json")).expect("the silent part's own results");
    assert_eq!(p1["part"]["index"].as_u64(), Some(1));
    check_accounting(&p1);
}

/// A closed loop with a query count split over three processes (`-c 8 -n 3000`): the parts'
/// concurrency adds up to 8 (shares that differ by at most one), their counts to 3,000, and
/// the merge issues and answers what one process does.
#[test]
fn a_closed_loop_split_over_three_parts_makes_the_single_run() {
    let server = Server::start();
    let target = server.udp_url();
    let dir = tempfile::tempdir().unwrap();
    let load = ["-c", "8", "-n", "3000", "-T", "1", "--name", "www.example.test"];
    let mut args = vec![target.as_str()];
    args.extend(load);
    let single = run_volley(&args);
    let single = single.ok().clone();
    assert_eq!(total(&single, "answered"), 3000, "{single:#}");
    let merged_out = dir.path().join("merged.json");
    let coord = Coord::start(Command::new(volley()), &format!("{}:0", lo(8)), 3, &merged_out, &["--wait", "60s"]);
    let mut children = Vec::new();
    for i in 0..3 {
        let part_arg = format!("{i}/3");
        let mut args = vec![target.as_str(), "--part", &part_arg, "--coordinator", &coord.addr];
        args.extend(load);
        children.push(part(Command::new(volley()), &args, &dir.path().join(format!("c{i}.json"))));
    }
    for c in children {
        let (code, err) = finish_part(c);
        assert_eq!(code, Some(0), "{err}");
    }
    let (code, said, merged) = coord.finish();
    assert_eq!(code, Some(0), "{said}");
    let merged = merged.expect("merged results");
    check_accounting(&merged);
    for key in ["issued", "sent", "answered"] {
        assert_eq!(total(&merged, key), total(&single, key), "{key}");
    }
    assert_eq!(merged["load"]["concurrency"].as_u64(), Some(8), "{:#}", merged["load"]);
    let (mut concurrency, mut count) = (Vec::new(), 0);
    for i in 0..3u64 {
        let p = read_results(&dir.path().join(format!("c{i}.json"))).unwrap();
        assert_eq!(p["part"]["index"].as_u64(), Some(i));
        check_accounting(&p);
        concurrency.push(p["load"]["concurrency"].as_u64().unwrap());
        count += p["load"]["count"].as_u64().unwrap();
        assert_eq!(total(&p, "issued"), p["load"]["count"].as_u64().unwrap(), "part {i} issues its count");
    }
    assert_eq!(concurrency.iter().sum::<u64>(), 8, "{concurrency:?}");
    assert!(concurrency.iter().all(|&c| c == 2 || c == 3), "{concurrency:?}");
    assert_eq!(count, 3000);
}

/// A part that never comes: the others start when the wait is over, and the merge names it.
#[test]
fn a_part_that_never_comes_is_named_after_the_wait() {
    let server = Server::start();
    let target = server.udp_url();
    let dir = tempfile::tempdir().unwrap();
    let merged_out = dir.path().join("merged.json");
    let mut coord = Coord::start(
        Command::new(volley()),
        &format!("{}:0", lo(2)),
        2,
        &merged_out,
        &["--wait", "2s", "--lead", "50ms"],
    );
    let args = [target.as_str(), "--part", "0/2", "--coordinator", &coord.addr, "-Q", "500", "-n", "500"];
    let c = part(Command::new(volley()), &args, &dir.path().join("p0.json"));
    assert!(coord.wait_for("waiting up to 2 s").contains("2 parts"));
    assert_eq!(finish_part(c).0, Some(0));
    let (code, said, merged) = coord.finish();
    assert_eq!(code, Some(3), "{said}");
    let merged = merged.unwrap();
    assert_eq!(merged["scale"]["part_list"][1]["status"], "never_came");
    assert_eq!(merged["scale"]["part_list"][1]["share"].as_f64(), Some(0.5));
    assert_eq!(total(&merged, "answered"), 250);
}

/// The coordinator killed after the start: the parts finish and write their own results, which
/// `volley merge` then combines into the run's figures.
#[test]
fn parts_outlive_their_coordinator_and_merge_later() {
    let server = Server::start();
    let target = server.udp_url();
    let dir = tempfile::tempdir().unwrap();
    let mut coord = Coord::start(Command::new(volley()), &format!("{}:0", lo(3)), 2, &dir.path().join("m.json"), &[]);
    let mut children = Vec::new();
    for i in 0..2 {
        let part_arg = format!("{i}/2");
        let args = [target.as_str(), "--part", &part_arg, "--coordinator", &coord.addr, "-Q", "800", "-n", "2400"];
        children.push(part(Command::new(volley()), &args, &dir.path().join(format!("p{i}.json"))));
    }
    coord.wait_for("start at");
    coord.child.kill().unwrap();
    let _ = coord.child.wait();
    for c in children {
        let (code, err) = finish_part(c);
        assert_eq!(code, Some(0), "{err}");
        assert!(err.contains("results not handed in"), "{err}");
    }
    let merged = dir.path().join("later.json");
    let out = run_cmd(
        Command::new(volley())
            .arg("merge")
            .arg(dir.path().join("p0.json"))
            .arg(dir.path().join("p1.json"))
            .arg("-o")
            .arg(&merged),
        RUN_WAIT,
    );
    assert!(out.status.success(), "{}", out.stderr);
    let m = read_results(&merged).unwrap();
    check_accounting(&m);
    assert_eq!(total(&m, "issued"), 2400);
    assert_eq!(total(&m, "answered"), 2400);
    assert_eq!(m["latency"]["count"].as_u64(), Some(2400));
    // Both parts started at the coordinator's one start: their series align without a shift.
    let p0 = read_results(&dir.path().join("p0.json")).unwrap();
    let p1 = read_results(&dir.path().join("p1.json")).unwrap();
    assert_eq!(p0["started_unix_ms"], p1["started_unix_ms"]);
    assert_eq!(rows(&m, "issued").iter().sum::<u64>(), 2400);
}

/// Bad parts and unreachable coordinators: one line, exit 2.
#[test]
fn bad_parts_are_refused_with_one_line() {
    let server = Server::start();
    let target = server.udp_url();
    let r = run_volley(&[&target, "--part", "3/2", "-n", "10"]);
    assert!(assert_usage_error(&r).contains("parts are numbered 0 to 1"));
    let r = run_volley(&[&target, "--part", "0/0", "-n", "10"]);
    assert!(assert_usage_error(&r).contains("at least 1"));
    let r = run_volley(&[&target, "--part", "x", "-n", "10"]);
    assert!(assert_usage_error(&r).contains("expected I/N"));
    let r = run_volley(&[&target, "--part", "1/4", "-c", "3", "-n", "10"]);
    assert!(assert_usage_error(&r).contains("concurrency 3 cannot be split into 4 parts"));
    let r = run_volley(&[&target, "--part", "1/3", "--parts", "4", "-n", "10"]);
    assert!(assert_usage_error(&r).contains("disagree"));
    let r = run_volley(&[&target, "--parts", "3", "-n", "10"]);
    assert!(assert_usage_error(&r).contains("which part is this?"));
    let closed = format!("127.0.0.1:{}", closed_tcp_port());
    let r = run_volley(&[&target, "--parts", "2", "--coordinator", &closed, "--coordinator-wait", "1s", "-n", "10"]);
    let line = assert_usage_error(&r);
    assert!(line.contains(&closed) && line.contains("refused"), "{line}");
    // A coordinator address that accepts the connection and never answers the hello: after
    // the wait, one line saying so.
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mute_addr = mute.local_addr().unwrap().to_string();
    let (tx, accepted) = mpsc::channel();
    std::thread::spawn(move || {
        if let Ok((conn, _)) = mute.accept() {
            let _ = tx.send(conn);
        }
    });
    let r = run_volley(&[&target, "--parts", "2", "--coordinator", &mute_addr, "--coordinator-wait", "1s", "-n", "10"]);
    let line = assert_usage_error(&r);
    assert!(line.contains(&mute_addr) && line.contains("no answer within 1.0 s"), "{line}");
    let held = accepted.recv_timeout(STARTUP_WAIT).expect("the part connected to the mute coordinator");
    drop(held);
    let r = run_volley(&[&target, "--start-at", "tomorrow", "-n", "10"]);
    assert!(assert_usage_error(&r).contains("invalid --start-at 'tomorrow'"));
}

/// Parts that would make another run, or are another volley, are refused with one line; the
/// part index comes from JOB_COMPLETION_INDEX as a Kubernetes Indexed Job sets it.
#[test]
fn mismatched_parts_are_refused_and_the_index_comes_from_the_job() {
    let server = Server::start();
    let target = server.udp_url();
    let dir = tempfile::tempdir().unwrap();
    let mut coord = Coord::start(Command::new(volley()), &format!("{}:0", lo(4)), 2, &dir.path().join("m.json"), &[]);
    let mut first = Command::new(volley());
    first.env("JOB_COMPLETION_INDEX", "1");
    let good = part(
        first,
        &[&target, "--parts", "2", "--coordinator", &coord.addr, "-Q", "500", "-n", "500"],
        &dir.path().join("p1.json"),
    );
    coord.wait_for("part 1/2 joined");
    // Another rate: refused, naming the flag that differs.
    let r = run_volley(&[&target, "--part", "0/2", "--coordinator", &coord.addr, "-Q", "900", "-n", "500"]);
    let line = assert_usage_error(&r);
    assert!(line.contains("refused by the coordinator") && line.contains("rate: Some(900.0)"), "{line}");
    // Another version (a raw hello): refused.
    let mut s = TcpStream::connect(&coord.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    writeln!(
        s,
        r#"{{"hello":{{"protocol":"volley.coordinate/1","version":"0.0.1 (old)","fingerprint":"x","args":[],"parts":2,"index":0,"items":0}}}}"#
    )
    .unwrap();
    let mut answer = String::new();
    BufReader::new(&s).read_line(&mut answer).unwrap();
    assert!(
        answer.contains("refused") && answer.contains("volley 0.0.1 (old) where the coordinator is volley"),
        "{answer}"
    );
    // Garbage: refused, and the coordinator carries on.
    let mut g = TcpStream::connect(&coord.addr).unwrap();
    g.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    // The real part 0 completes the run.
    let ok = part(
        Command::new(volley()),
        &[&target, "--part", "0/2", "--coordinator", &coord.addr, "-Q", "500", "-n", "500"],
        &dir.path().join("p0.json"),
    );
    assert_eq!(finish_part(good).0, Some(0));
    assert_eq!(finish_part(ok).0, Some(0));
    let (code, said, merged) = coord.finish();
    assert_eq!(code, Some(0), "{said}");
    let p1 = read_results(&dir.path().join("p1.json")).unwrap();
    assert_eq!(p1["part"]["index"].as_u64(), Some(1));
    assert_eq!(total(&merged.unwrap(), "answered"), 500);
}

/// Simulated clients split three ways, started together by `--start-at` (no coordinator): each
/// client goes whole to one part with its own random timing, so the parts together issue
/// exactly the queries one process issues (Poisson gaps included), and `volley merge` puts them
/// back together.
#[test]
fn clients_split_by_start_at_issue_what_one_process_issues() {
    let server = Server::start();
    let target = server.udp_url();
    let dir = tempfile::tempdir().unwrap();
    let load = ["--clients", "31", "--client-rate", "20", "--arrivals", "poisson", "-l", "2s", "-T", "1"];
    let mut args = vec![target.as_str()];
    args.extend(load);
    let single = run_volley(&args);
    let single = single.ok().clone();
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let at = (now_ms + 3000).to_string();
    let mut children = Vec::new();
    for i in 0..3 {
        let part_arg = format!("{i}/3");
        let mut args = vec![target.as_str(), "--part", &part_arg, "--start-at", &at];
        args.extend(load);
        children.push(part(Command::new(volley()), &args, &dir.path().join(format!("c{i}.json"))));
    }
    for c in children {
        let (code, err) = finish_part(c);
        assert_eq!(code, Some(0), "{err}");
    }
    let mut clients = 0;
    for i in 0..3u64 {
        let p = read_results(&dir.path().join(format!("c{i}.json"))).unwrap();
        assert_eq!(p["part"]["index"].as_u64(), Some(i));
        assert_eq!(p["part"]["start"]["planned_unix_ns"].as_u64(), Some(at.parse::<u64>().unwrap() * 1_000_000));
        clients += p["load"]["clients"].as_u64().unwrap();
    }
    assert_eq!(clients, 31, "every client in exactly one part");
    let merged = dir.path().join("m.json");
    let files: Vec<PathBuf> = (0..3).map(|i| dir.path().join(format!("c{i}.json"))).collect();
    let out = run_cmd(Command::new(volley()).arg("merge").args(&files).arg("-o").arg(&merged), RUN_WAIT);
    assert!(out.status.success(), "{}", out.stderr);
    let m = read_results(&merged).unwrap();
    check_accounting(&m);
    assert_eq!(total(&m, "issued"), total(&single, "issued"), "the same Poisson arrivals whatever the split");
    assert_eq!(total(&m, "answered"), total(&single, "answered"));
    assert_eq!(m["load"]["clients"].as_u64(), Some(31));
    assert!(!m["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("split run")));
}

/// Replay clients go whole to one part each, dealt by their load: a capture whose first
/// client sends 30 queries and three others 10 each splits 30 / 30 between two parts (dealt in
/// turn it would be 40 / 20), and the parts together replay what one process replays.
#[test]
fn replay_clients_are_split_by_their_load() {
    let server = Server::start();
    let target = server.udp_url();
    let dir = tempfile::tempdir().unwrap();
    let mut packets: Vec<([u8; 4], f64)> = (0..30).map(|i| ([10, 0, 1, 1], i as f64 * 0.02)).collect();
    for c in 2..=4u8 {
        packets.extend((0..10).map(|i| ([10, 0, 1, c], 0.01 + i as f64 * 0.06)));
    }
    packets.sort_by(|a, b| a.1.total_cmp(&b.1));
    let pcap = dir.path().join("split.pcap");
    std::fs::write(&pcap, query_capture(&packets, "split.test")).unwrap();
    let clients = dir.path().join("split.clients");
    let out = run_cmd(Command::new(volley()).arg("pcap").arg(&pcap).arg("-o").arg(&clients), RUN_WAIT);
    assert!(out.status.success(), "volley pcap: {}", out.stderr);
    let clients_s = clients.to_str().unwrap();
    let load = ["--replay", clients_s, "-T", "1"];
    let mut args = vec![target.as_str()];
    args.extend(load);
    let single = run_volley(&args);
    let single = single.ok().clone();
    assert_eq!(total(&single, "issued"), 60, "the capture's 60 queries");
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let at = (now_ms + 3000).to_string();
    let mut children = Vec::new();
    for i in 0..2 {
        let part_arg = format!("{i}/2");
        let mut args = vec![target.as_str(), "--part", &part_arg, "--start-at", &at];
        args.extend(load);
        children.push(part(Command::new(volley()), &args, &dir.path().join(format!("r{i}.json"))));
    }
    for c in children {
        let (code, err) = finish_part(c);
        assert_eq!(code, Some(0), "{err}");
    }
    let parts: Vec<Value> = (0..2).map(|i| read_results(&dir.path().join(format!("r{i}.json"))).unwrap()).collect();
    let issued: Vec<u64> = parts.iter().map(|p| total(p, "issued")).collect();
    assert_eq!(issued, vec![30, 30], "each part replays half the queries");
    let clients_of: Vec<u64> = parts.iter().map(|p| p["load"]["clients"].as_u64().unwrap()).collect();
    assert_eq!(clients_of, vec![1, 3], "the heavy client alone on one part, the three others on the other");
    let merged = dir.path().join("m.json");
    let files: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("r{i}.json"))).collect();
    let out = run_cmd(Command::new(volley()).arg("merge").args(&files).arg("-o").arg(&merged), RUN_WAIT);
    assert!(out.status.success(), "{}", out.stderr);
    let m = read_results(&merged).unwrap();
    check_accounting(&m);
    assert_eq!(total(&m, "issued"), total(&single, "issued"));
    assert_eq!(total(&m, "answered"), total(&single, "answered"));
}

/// `volley limit --part 0/2` sends half of each step: against a responder that answers 500 qps,
/// the search finds the whole run's limit at about 1,000 qps (the two parts together), and
/// judges each step against the part's share (no step is generator-bound for sending half).
#[test]
fn a_limit_search_part_sends_its_share_of_each_step() {
    let server = Server::start_with(&["--max-qps", "500", "-T", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("limit.json");
    let url = server.udp_url();
    let mut cmd = Command::new(volley());
    cmd.args(["limit", &url, "--part", "0/2", "--start", "250", "--max", "16000", "--step-duration", "2s"])
        .args(["--refine", "4", "-t", "300ms", "-T", "1", "--progress", "never", "-o"])
        .arg(&out);
    let r = run_cmd(&mut cmd, RUN_WAIT);
    assert_eq!(r.status.code(), Some(0), "stderr: {}", r.stderr);
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let s = &v["searches"][0];
    assert_eq!(s["stopped"], "found", "{s}");
    let limit = s["limit"].as_f64().unwrap();
    assert!((limit - 1000.0).abs() / 1000.0 <= 0.15, "limit {limit}: {s}");
    assert!(!r.stderr.contains("generator-bound"), "{}", r.stderr);
    for (step, run) in s["steps"].as_array().unwrap().iter().zip(s["runs"].as_array().unwrap()) {
        assert_eq!(run["part"]["index"].as_u64(), Some(0));
        assert_eq!(run["part"]["count"].as_u64(), Some(2));
        let load = step["load"].as_f64().unwrap();
        assert!((run["load"]["rate"].as_f64().unwrap() - load / 2.0).abs() < 1e-6, "{step}");
    }
    let r = run_volley(&[&url, "--part", "0/2", "--start-at", "0", "-n", "10"]);
    assert_eq!(r.status.code(), Some(0), "a start in the past starts at once: {}", r.stderr);
    assert!(r.ok()["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("start time had passed")));
    let mut cmd = Command::new(volley());
    cmd.args(["limit", &url, "--part", "0/2", "--start-at", "0"]);
    let r = run_cmd(&mut cmd, RUN_WAIT);
    assert_eq!(r.status.code(), Some(2));
    assert!(r.stderr.contains("apply to volley run"), "{}", r.stderr);
}

/// A limit search split across parts on separate simulated hosts (`volley limit --parts N
/// --coordinator`): the coordinator announces each step's load, the parts start each step
/// together (the start skew is recorded for every step) and each sends its share, and every
/// step is judged on the merged figures. Against a responder that answers 1,000 qps, the split
/// search finds the limit a single process finds, within the noise of the method (10 %), with
/// the same queries issued at each load both made.
#[test]
fn a_split_limit_search_starts_each_step_together_and_finds_the_single_limit() {
    let mut hosts = Hosts::new();
    let responder_ns = hosts.host(2);
    let coord_ns = hosts.host(3);
    let server = Server::start_via(Hosts::volley(&responder_ns), &["-l", "198.18.0.2", "--max-qps", "1000", "-T", "1"]);
    let target = format!("udp://{}", server.udp_addr());
    let dir = tempfile::tempdir().unwrap();
    let search = [
        "--start",
        "250",
        "--max",
        "16000",
        "--step-duration",
        "2s",
        "--refine",
        "4",
        "-t",
        "300ms",
        "-T",
        "1",
        "--progress",
        "never",
    ];
    let parts_ns: Vec<String> = (0..3u8).map(|i| hosts.host(10 + i)).collect();

    // One process's search, from a host of its own.
    let single_out = dir.path().join("single.json");
    let mut cmd = Hosts::volley(&parts_ns[0]);
    cmd.args(["limit", &target]).args(search).arg("-o").arg(&single_out);
    let r = run_cmd(&mut cmd, RUN_WAIT);
    assert_eq!(r.status.code(), Some(0), "{}", r.stderr);
    let single = read_results(&single_out).unwrap();
    let single = &single["searches"][0];
    assert_eq!(single["stopped"], "found", "{single}");
    let single_limit = single["limit"].as_f64().unwrap();
    let issued_at = |s: &Value, load: f64| {
        s["steps"]
            .as_array()
            .unwrap()
            .iter()
            .zip(s["runs"].as_array().unwrap())
            .find(|(st, _)| st["load"].as_f64() == Some(load))
            .map(|(_, r)| total(r, "issued"))
    };

    for n in [2u32, 3] {
        let out = dir.path().join(format!("limit-{n}.json"));
        let coord = Coord::start(Hosts::volley(&coord_ns), "198.18.0.3:0", n, &out, &["--wait", "60s"]);
        let cmds = parts_ns.iter().take(n as usize).map(|ns| Hosts::volley(ns)).collect();
        let (said, doc) = split_search(cmds, &target, coord, &search);
        assert_eq!(doc["schema"], "volley.limit/1");
        assert_eq!(doc["parts"].as_u64(), Some(u64::from(n)));
        let s = &doc["searches"][0];
        assert_eq!(s["stopped"], "found", "N={n}: {s}\n{said}");
        let limit = s["limit"].as_f64().unwrap();
        assert!(
            (limit - single_limit).abs() / single_limit <= 0.10,
            "N={n}: split limit {limit}, single {single_limit}\n{said}"
        );
        let steps = s["steps"].as_array().unwrap();
        let runs = s["runs"].as_array().unwrap();
        assert_eq!(steps.len(), runs.len());
        let mut skews = Vec::new();
        for (step, run) in steps.iter().zip(runs) {
            let load = step["load"].as_f64().unwrap();
            assert_eq!(step["ok"].as_bool().unwrap(), load <= limit, "N={n}: {step}");
            check_accounting(run);
            // The parts' shares add up to the step's load, and the step issued what one process
            // issues at that load.
            assert!((run["load"]["rate"].as_f64().unwrap() - load).abs() < 1e-6, "N={n}: {step}");
            if let Some(one) = issued_at(single, load) {
                assert_eq!(total(run, "issued"), one, "N={n} at {load} qps");
            }
            // Every part started this step, from its own host, at the one start given.
            let scale = &run["scale"];
            assert_eq!(scale["parts"].as_u64(), Some(u64::from(n)));
            assert_eq!(scale["complete"].as_bool(), Some(true), "{scale:#}");
            let list = scale["part_list"].as_array().unwrap();
            let mut peers: Vec<&str> =
                list.iter().map(|p| p["peer"].as_str().unwrap().split(':').next().unwrap()).collect();
            peers.sort_unstable();
            peers.dedup();
            assert_eq!(peers.len(), n as usize, "{scale:#}");
            assert!(list.iter().all(|p| p["status"] == "merged" && p["start_offset_ns"].is_i64()), "{scale:#}");
            let skew = scale["start_skew_ns"].as_u64().expect("each step's start skew");
            skews.push(skew);
        }
        // Bounded only against steps that were not started together at all (parts that began
        // each step when they were ready would be tens to hundreds of ms apart every time); a
        // busy machine may stall one part of one step.
        let close = skews.iter().filter(|&&s| s < 50_000_000).count();
        assert!(close * 2 > skews.len(), "N={n}: start skews {skews:?} ns");
        let skews: Vec<String> = skews.iter().map(|s| format!("{:.3}", *s as f64 / 1e6)).collect();
        eprintln!("N={n}: limit {limit} (single {single_limit}); start skew per step (ms): {}", skews.join(", "));
    }
    drop(server);
}

/// A split search by simulated clients: each step's clients go whole to the parts (client `c`
/// to part `c mod N`), so each part's share follows the step's count, and the coordinator's
/// record of the shares does too (not the first step's count).
#[test]
fn a_split_search_by_clients_records_each_steps_shares() {
    let server = Server::start_with(&["--max-qps", "200", "-T", "1"]);
    let target = server.udp_url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("limit.json");
    let search = ["--by", "clients", "--client-rate", "20", "--start", "5", "--max", "64", "--step-duration", "2s"];
    let search_rest = ["--refine", "1", "-t", "300ms", "-T", "1", "--progress", "never"];
    let coord = Coord::start(Command::new(volley()), "127.0.0.1:0", 2, &out, &["--wait", "60s"]);
    let args: Vec<&str> = search.iter().chain(&search_rest).copied().collect();
    let (_, doc) = split_search((0..2).map(|_| Command::new(volley())).collect(), &target, coord, &args);
    let s = &doc["searches"][0];
    let steps = s["steps"].as_array().unwrap();
    let runs = s["runs"].as_array().unwrap();
    let mut counts = Vec::new();
    for (step, run) in steps.iter().zip(runs) {
        let clients = step["load"].as_f64().unwrap().round() as u64;
        counts.push(clients);
        check_accounting(run);
        assert_eq!(run["load"]["clients"].as_u64(), Some(clients), "{step}");
        let list = run["scale"]["part_list"].as_array().unwrap();
        for (i, p) in list.iter().enumerate() {
            let mine = clients / 2 + u64::from((i as u64) < clients % 2);
            let share = p["share"].as_f64().unwrap();
            assert!((share - mine as f64 / clients as f64).abs() < 1e-9, "step of {clients} clients, part {i}: {p}");
        }
    }
    assert!(counts.iter().any(|&c| c % 2 == 1) && counts.iter().any(|&c| c != counts[0]), "steps {counts:?}");
    drop(server);
}

/// A part of a split limit search killed during a step: the step is incomplete, so the search
/// stops there; the coordinator writes the step (naming the lost part with its share), says
/// so, exits 3, and tells the other part the search is over (it exits 0).
#[test]
fn a_part_lost_mid_search_ends_the_split_search_incomplete() {
    let server = Server::start_with(&["--max-qps", "1000", "-T", "1"]);
    let target = server.udp_url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("limit.json");
    let mut coord = Coord::start(Command::new(volley()), &format!("{}:0", lo(6)), 2, &out, &["--silence", "5s"]);
    let mut children: Vec<Child> = (0..2)
        .map(|_| {
            Command::new(volley())
                .args(["limit", &target, "--parts", "2", "--coordinator", &coord.addr])
                .args(["--start", "250", "--max", "16000", "--step-duration", "3s", "-t", "300ms", "-T", "1"])
                .args(["--progress", "never"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start a part")
        })
        .collect();
    // The first step under way (its first second reported; it runs 3): a part dies.
    coord.wait_for("second    1:");
    let mut victim = children.remove(1);
    victim.kill().unwrap();
    let _ = victim.wait();
    let (code, err) = finish_part(children.remove(0));
    assert_eq!(code, Some(0), "the other part is told the search is over: {err}");
    let (code, said, doc) = coord.finish();
    assert_eq!(code, Some(3), "{said}");
    assert!(
        said.contains("INCOMPLETE") && said.contains("incomplete: the search stopped at step 1: 50.0% of the load"),
        "{said}"
    );
    let doc = doc.expect("the steps measured are written");
    let s = &doc["searches"][0];
    assert_eq!(s["stopped"], "interrupted", "{s}");
    let runs = s["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{s}");
    let last = &runs[0]["scale"];
    assert_eq!(last["complete"].as_bool(), Some(false), "{last:#}");
    // (The coordinator gave the indexes in the order the parts joined.)
    let mut status: Vec<&str> =
        last["part_list"].as_array().unwrap().iter().map(|p| p["status"].as_str().unwrap()).collect();
    status.sort_unstable();
    assert_eq!(status, ["lost", "merged"], "{last:#}");
    assert!((last["missing_share"].as_f64().unwrap() - 0.5).abs() < 1e-9);
    check_accounting(&runs[0]);
}
