//! `volley link`: commands behind the emulated link, end to end through real TUN devices and a
//! network namespace, against `volley serve` and kdig; the tests named `..._over_xdp` run the
//! same over the XDP device (`--device xdp`: veth pairs and AF_XDP sockets).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// `volley link ARGS -- sh -c SCRIPT`, with `$V` the volley binary in the script.
fn link(args: &[&str], script: &str) -> Output {
    link_on(&[], args, script)
}

/// [`link`] with the device arguments `dev` (none: the default, TUN; `XDP`).
fn link_on(dev: &[&str], args: &[&str], script: &str) -> Output {
    let mut cmd = Command::new(volley());
    cmd.arg("link").args(dev).args(args).arg("--").arg("sh").arg("-c").arg(script).env("V", volley());
    run_cmd(&mut cmd, RUN_WAIT)
}

/// The host TUN devices this process's children made (`vlPIDhN`), present now.
fn devices_of(pid: u32) -> Vec<String> {
    std::fs::read_dir("/sys/class/net")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("vl{pid}h")))
        .collect()
}

/// A `volley run` inside a link: `-Q RATE -n COUNT` at the server's UDP port, results read back.
/// The device arguments of the XDP device.
const XDP: &[&str] = &["--device", "xdp"];

fn run_in_link(dev: &[&str], link_args: &[&str], port: u16, run_args: &str, dir: &Path) -> (Output, serde_json::Value) {
    let out_file = dir.join("r.json");
    let script =
        format!("exec \"$V\" run udp://$VOLLEY_LINK_HOST:{port} {run_args} --progress never -o {}", out_file.display());
    let out = link_on(dev, link_args, &script);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    let v = read_results(&out_file).expect("results written inside the link");
    check_accounting(&v);
    (out, v)
}

fn ms(v: &serde_json::Value, key: &str) -> f64 {
    v["latency"][key].as_u64().unwrap_or_else(|| panic!("latency.{key}")) as f64 / 1e6
}

/// The round trip through the link is the loopback one plus the delay of each direction: a
/// delay given for both directions counts twice, `up:` once. The lower bound is exact (no
/// packet leaves before its time); the upper is generous (median within 2 ms), as this machine
/// is shared.
#[test]
fn round_trip_is_the_delay_of_each_direction() {
    round_trip(&[]);
}

#[test]
fn round_trip_is_the_delay_of_each_direction_over_xdp() {
    round_trip(XDP);
}

fn round_trip(dev: &[&str]) {
    let server = Server::start_with(&["--listen", "0.0.0.0"]);
    let port = server.udp_addr().port();
    let dir = tempfile::tempdir().unwrap();
    for (args, want_ms) in [(&["delay=10ms", "--seed", "1"][..], 20.0), (&["up:delay=15ms", "--seed", "1"][..], 15.0)] {
        // The median is timed: on a loaded machine an attempt may miss it; up to 3 attempts.
        let (out, v) = (1..=3)
            .map(|attempt| {
                let (out, v) = run_in_link(dev, args, port, "-Q 50 -n 50 -t 2s", dir.path());
                let p50 = ms(&v, "p50_ns");
                if p50 >= want_ms + 2.0 {
                    assert!(attempt < 3, "{args:?}: median {p50} ms, want {want_ms} ms + at most 2");
                    eprintln!("{args:?}: attempt {attempt}: median {p50} ms");
                }
                (out, v, p50)
            })
            .find(|(_, _, p50)| *p50 < want_ms + 2.0)
            .map(|(out, v, _)| (out, v))
            .unwrap();
        assert_eq!(total(&v, "answered"), 50, "{}", out.stderr);
        let min = ms(&v, "min_ns");
        assert!(min >= want_ms * 0.999, "{args:?}: min {min} ms below the {want_ms} ms the link adds");
        // Every query and answer crossed the link: 51 (the run's probe) each way.
        assert_eq!(link_counter(&out.stderr, "up", "out"), 51, "{}", out.stderr);
        assert_eq!(link_counter(&out.stderr, "down", "out"), 51, "{}", out.stderr);
        assert!(out.stderr.contains("volley link: lateness p50"), "{}", out.stderr);
    }
}

/// Loss on the way up: the link drops within 3 standard deviations of the binomial
/// expectation, and each dropped query is one the run counts as timed out.
#[test]
fn loss_is_binomial_and_every_lost_query_times_out() {
    loss(&[]);
}

#[test]
fn loss_is_binomial_and_every_lost_query_times_out_over_xdp() {
    loss(XDP);
}

fn loss(dev: &[&str]) {
    let server = Server::start_with(&["--listen", "0.0.0.0"]);
    let port = server.udp_addr().port();
    let dir = tempfile::tempdir().unwrap();
    let (out, v) = run_in_link(dev, &["up:loss=10%", "--seed", "42"], port, "-Q 4000 -n 6000 -t 500ms", dir.path());
    let n = link_counter(&out.stderr, "up", "in");
    let lost = link_counter(&out.stderr, "up", "loss");
    let (n_f, p) = (n as f64, 0.10);
    let sd = (n_f * p * (1.0 - p)).sqrt();
    assert!((lost as f64 - n_f * p).abs() < 3.0 * sd, "lost {lost} of {n}, expected {} ± {}", n_f * p, 3.0 * sd);
    assert_eq!(link_counter(&out.stderr, "up", "out") + lost, n);
    assert_eq!(link_counter(&out.stderr, "down", "loss"), 0);
    // The probe query may be among the lost ones; the others are the run's timeouts.
    let timed_out = total(&v, "timed_out");
    assert!(timed_out == lost || timed_out + 1 == lost, "timed out {timed_out}, link lost {lost}\n{}", out.stderr);
    // Same seed, same losses (the traffic is the same packets in the same order).
    let (again, _) = run_in_link(dev, &["up:loss=10%", "--seed", "42"], port, "-Q 4000 -n 6000 -t 500ms", dir.path());
    assert_eq!(link_counter(&again.stderr, "up", "loss"), lost);
}

/// kdig, a real peer, gets its answer from `volley serve` through the link, over UDP and TCP.
#[test]
fn kdig_gets_answers_through_the_link() {
    kdig(&[]);
}

#[test]
fn kdig_gets_answers_through_the_link_over_xdp() {
    kdig(XDP);
}

fn kdig(dev: &[&str]) {
    require("kdig");
    let server = Server::start_with(&["--listen", "0.0.0.0", "--udp-port", "0", "--tcp-port", "0"]);
    let (u, t) = (server.udp_addr().port(), server.tcp_addr().port());
    let out = link_on(
        dev,
        &["4g", "--seed", "3", "up:loss=0%"],
        &format!(
            "kdig @$VOLLEY_LINK_HOST -p {u} +notcp +short www.example.test A && \
             kdig @$VOLLEY_LINK_HOST -p {t} +tcp +short www.example.test A"
        ),
    );
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.matches("192.0.2.1").count(), 2, "{}", out.stdout);
    assert!(out.stderr.contains("up: delay 53.3ms, jitter 1ms uniform (reorders); down: none"), "{}", out.stderr);
    // TCP's handshake and teardown crossed too.
    assert!(link_counter(&out.stderr, "up", "out") >= 4, "{}", out.stderr);
}

/// The command's environment, addresses and exit status; the namespace's only way out is the
/// link (the host's loopback is not reachable from inside).
#[test]
fn command_sees_the_link_and_its_status_is_returned() {
    let out = link(&[], "echo host=$VOLLEY_LINK_HOST local=$VOLLEY_LINK_LOCAL; exit 7");
    assert_eq!(out.status.code(), Some(7), "{}", out.stderr);
    let host = out.stdout.split("host=").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
    let local = out.stdout.split("local=").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
    assert!(host.starts_with("10.213.") && local.starts_with("10.213."), "{}", out.stdout);
    assert!(out.stderr.contains(&format!("host {host} ($VOLLEY_LINK_HOST), namespace {local}")), "{}", out.stderr);
    // A server on the host's loopback is out of reach from the namespace.
    let server = Server::start();
    let out = link(&[], &format!("exec \"$V\" query udp://127.0.0.1:{} example.test -t 1s", server.udp_addr().port()));
    assert_ne!(out.status.code(), Some(0), "{}", out.stdout);
}

/// Nothing is left behind: when the command ends, on SIGTERM (passed on to the command), and
/// when volley link itself is killed (SIGKILL: the devices die with their descriptors, the
/// command by PR_SET_PDEATHSIG); a later link starts cleanly. Two links side by side differ.
#[test]
fn nothing_is_left_behind_and_links_do_not_collide() {
    nothing_left_behind(&[]);
}

#[test]
fn nothing_is_left_behind_and_links_do_not_collide_over_xdp() {
    nothing_left_behind(XDP);
}

fn nothing_left_behind(dev: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    for sig in [libc::SIGTERM, libc::SIGKILL] {
        let pidfile = dir.path().join(format!("pid{sig}"));
        let mut child = Command::new(volley())
            .arg("link")
            .args(dev)
            .args(["delay=1ms", "--", "sh", "-c"])
            .arg(format!("echo $$ > {}; exec sleep 60", pidfile.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let link_pid = child.id();
        let deadline = Instant::now() + STARTUP_WAIT;
        while !(pidfile.exists() && std::fs::read_to_string(&pidfile).unwrap().ends_with('\n')) {
            assert!(Instant::now() < deadline, "the command did not start");
            thread::sleep(Duration::from_millis(20));
        }
        let inner: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        assert_eq!(devices_of(link_pid).len(), 1, "the host's device exists while the link runs");
        signal(&child, sig);
        let status = wait_bounded(&mut child, Duration::from_secs(10)).expect("volley link ended");
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        if sig == libc::SIGTERM {
            assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{err}");
            assert!(err.contains("volley link: lateness"), "counters printed: {err}");
        }
        // The command is gone (dead or a zombie its new parent will reap).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{inner}/stat")).unwrap_or_default();
            if stat.is_empty() || stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')) {
                break;
            }
            assert!(Instant::now() < deadline, "sig {sig}: the command {inner} outlived volley link: {stat}");
            thread::sleep(Duration::from_millis(20));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !devices_of(link_pid).is_empty() {
            assert!(Instant::now() < deadline, "sig {sig}: devices left: {:?}", devices_of(link_pid));
            thread::sleep(Duration::from_millis(20));
        }
    }
    // Two at once, each with its own addresses; after both, nothing remains.
    let dev_a = dev.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let a = thread::spawn(move || {
        let dev_a: Vec<&str> = dev_a.iter().map(String::as_str).collect();
        link_on(&dev_a, &["delay=1ms"], "sleep 1; echo $VOLLEY_LINK_HOST")
    });
    let b = link_on(dev, &["delay=1ms"], "sleep 1; echo $VOLLEY_LINK_HOST");
    let a = a.join().unwrap();
    assert_eq!((a.status.code(), b.status.code()), (Some(0), Some(0)), "{}\n{}", a.stderr, b.stderr);
    assert_ne!(a.stdout.trim(), b.stdout.trim());
}

/// Bad input: one line, exit 2, and no device made.
#[test]
fn bad_input_is_one_line_exit_2() {
    for args in [
        &["5g"][..],
        &["delay=-3ms"][..],
        &["loss=3"][..],
        &["queue=10"][..],
        &["up:loss=1%,burst=0"][..],
        &["bogus=1"][..],
        &["--device", "bogus"][..],
    ] {
        let mut cmd = Command::new(volley());
        let out = run_cmd(cmd.arg("link").args(args).args(["--", "true"]), RUN_WAIT);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
        assert!(out.stderr.starts_with("volley: error: "), "{args:?}: {}", out.stderr);
    }
    // No command; a command that does not exist.
    let out = run_cmd(Command::new(volley()).args(["link", "delay=1ms"]), RUN_WAIT);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    // The link was up when the command failed to start: it is taken down all the same.
    let child = Command::new(volley())
        .args(["link", "--", "/nonexistent/cmd"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("volley: error: cannot run '/nonexistent/cmd'"), "{stderr}");
    assert_eq!(stderr.lines().filter(|l| l.starts_with("volley: error")).count(), 1, "{stderr}");
    assert!(devices_of(pid).is_empty(), "{:?}", devices_of(pid));
}

/// `volley run --link`: the generator's sockets live behind the link (a target on 127.0.0.1 is
/// reached at the link's host end). The RTT the transports measure is the emulated one: never
/// more than 5 % below (the kernel's smoothing), TCP_INFO's at most 10 % above and QUIC's path
/// RTT at most 25 % above, as both hold the debug-built responder's own work (docs/link.md says
/// why; the 5 % for TCP_INFO is checked with an echo of the test's own in
/// crates/link/tests/accuracy.rs), and handshakes take their round trips: TCP 1, DoT and
/// DoH 2 (TCP, then TLS 1.3), DoQ 1 or 2 (2 when the server's anti-amplification limit stalls
/// it).
#[test]
fn run_behind_a_link_measures_the_emulated_rtt_and_round_trips() {
    let server = Server::start_encrypted(&["--listen", "0.0.0.0"]);
    let port = |kind: &str| server.listener(kind).port();
    for (url, trips) in [
        (format!("udp://127.0.0.1:{}", port("udp")), None),
        (format!("tcp://127.0.0.1:{}", port("tcp")), Some(&[1][..])),
        (format!("tls://127.0.0.1:{}", port("dot")), Some(&[2][..])),
        (format!("https://127.0.0.1:{}/dns-query", port("doh")), Some(&[2][..])),
        (format!("quic://127.0.0.1:{}", port("doq")), Some(&[1, 2][..])),
    ] {
        let r = run_volley(&[
            &url,
            "--link",
            "delay=10ms",
            "--link-seed",
            "1",
            "-Q",
            "20",
            "-n",
            "20",
            "--ca",
            server.ca_str(),
        ]);
        let v = r.ok();
        check_accounting(v);
        assert_eq!(total(v, "answered"), 20, "{url}: {}", r.stderr);
        assert!(r.stderr.contains("volley link: host 10.213."), "{url}: {}", r.stderr);
        assert!(link_counter(&r.stderr, "up", "out") >= 21, "{url}: {}", r.stderr);
        let min = ms(v, "min_ns");
        assert!(min >= 20.0 * 0.999, "{url}: latency min {min} ms below the link's 20 ms");
        // The results carry the link: spec, seed, and the counters printed on stderr.
        let l = &v["link"];
        assert_eq!((l["spec"].as_str(), l["seed"].as_u64()), (Some("delay=10ms"), Some(1)), "{url}: {l}");
        assert_eq!(l["up"]["settings"], "delay 10ms");
        for (dir, key, field) in
            [("up", "out", "packets_out"), ("down", "in", "packets_in"), ("up", "loss", "dropped_loss")]
        {
            assert_eq!(l[dir][field].as_u64(), Some(link_counter(&r.stderr, dir, key)), "{url}: {dir}.{field}");
        }
        assert_eq!(
            l["lateness"]["count"].as_u64(),
            Some(l["up"]["packets_out"].as_u64().unwrap() + l["down"]["packets_out"].as_u64().unwrap())
        );
        assert!(r.stdout.contains("link up") && r.stdout.contains("link late"), "{url}: {}", r.stdout);
        let Some(trips) = trips else { continue };
        let rtt = v["connections"]["rtt"]["p50_ns"].as_u64().unwrap() as f64 / 1e6;
        // TCP_INFO's RTT within 10 % above (the time until the server's ACK: a busy machine's
        // debug-built responder doing TLS read it 21.6 ms over DoH once). QUIC's path RTT also
        // holds the server's processing of the handshake's packets (run.md), about 1 ms for
        // this debug-built responder under the tests' load, 3.8 ms once (a clean clone's CI,
        // 2026-12-01): within 25 % above. Never below the link's (5 %: the kernel's smoothing).
        let above = if url.starts_with("quic") { 0.25 } else { 0.10 };
        assert!(rtt >= 20.0 * 0.95 && rtt < 20.0 * (1.0 + above), "{url}: RTT {rtt} ms, the link's 20 ms");
        let ratio = v["connections"]["handshake_rtt_ratio_milli"]["p50_ns"].as_u64().unwrap() as f64 / 1000.0;
        assert!(trips.contains(&(ratio.round() as i32)), "{url}: handshake {ratio} round trips, want {trips:?}");
    }
    // Bad link input is a usage error before anything starts.
    let r = run_volley(&[&format!("udp://127.0.0.1:{}", port("udp")), "--link", "delay=oops", "-n", "1"]);
    let e = assert_usage_error(&r);
    assert!(e.contains("--link"), "{e}");

    // Not permitted (without CAP_NET_ADMIN and CAP_SYS_ADMIN), and no /dev/net/tun (hidden in a
    // mount namespace of its own): one line, exit 2.
    let v = volley();
    let v = v.to_str().unwrap();
    for (cmd, what) in [
        (
            vec![
                require("setpriv").to_str().unwrap().to_string(),
                "--bounding-set=-net_admin,-sys_admin".into(),
                "--inh-caps=-net_admin,-sys_admin".into(),
                v.into(),
            ],
            "not permitted to make a TUN device",
        ),
        (
            vec![
                require("unshare").to_str().unwrap().to_string(),
                "-m".into(),
                "sh".into(),
                "-c".into(),
                format!("mount -t tmpfs none /dev/net && exec {v} \"$@\""),
                "sh".into(),
            ],
            "no TUN device: cannot open /dev/net/tun",
        ),
    ] {
        let mut c = Command::new(&cmd[0]);
        c.args(&cmd[1..]).args(["link", "delay=1ms", "--", "true"]);
        let out = run_cmd(&mut c, RUN_WAIT);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(out.stderr.starts_with(&format!("volley: error: {what}")), "{}", out.stderr);
    }
}

/// Ctrl-C (SIGINT to the whole foreground process group, as a terminal sends it): the command
/// gets it once, a `volley run` inside ends with its results (status interrupted, exit 130),
/// and volley link returns that status, prints its counters and leaves nothing behind.
#[test]
fn ctrl_c_reaches_the_command_once_and_the_link_goes() {
    use std::os::unix::process::CommandExt;
    let server = Server::start_with(&["--listen", "0.0.0.0"]);
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("r.json");
    let mut child = Command::new(volley())
        .args(["link", "delay=1ms", "--", "sh", "-c"])
        .arg(format!(
            "exec \"$V\" run udp://$VOLLEY_LINK_HOST:{} -Q 100 -l 60s --progress never -q -o {}",
            server.udp_addr().port(),
            out_file.display()
        ))
        .env("V", volley())
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let deadline = Instant::now() + STARTUP_WAIT;
    while devices_of(pid).is_empty() {
        assert!(Instant::now() < deadline, "no link came up");
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(Duration::from_millis(1500));
    // SAFETY: kill(2) of the process group we made.
    assert_eq!(unsafe { libc::kill(-(pid as i32), libc::SIGINT) }, 0);
    let status = wait_bounded(&mut child, Duration::from_secs(20)).expect("volley link ended");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    let v = read_results(&out_file).unwrap_or_else(|| panic!("no results after Ctrl-C: {err}"));
    assert_eq!(v["status"], "interrupted");
    check_accounting(&v);
    assert!(err.contains("volley link: lateness"), "{err}");
    assert!(devices_of(pid).is_empty());
}

/// `volley serve --cert-chain-bytes N` (seeds/002's anti-amplification case): a DoQ handshake
/// with the default chain (about 500 bytes) takes 1 round trip; with a 6,000-byte chain the
/// server's first flight exceeds three times the client's 1,200-byte Initial and waits for the
/// client's acknowledgement: 2 round trips. Over DoT (TCP has no such limit) the chain costs
/// none.
#[test]
fn a_large_certificate_chain_costs_doq_a_round_trip() {
    for (chain, doq_trips) in [(None, 1), (Some("6000"), 2)] {
        let mut args = vec!["--listen", "0.0.0.0"];
        if let Some(n) = chain {
            args.extend(["--cert-chain-bytes", n]);
        }
        let server = Server::start_encrypted(&args);
        for (url, trips) in [
            (format!("quic://127.0.0.1:{}", server.listener("doq").port()), doq_trips),
            (format!("tls://127.0.0.1:{}", server.listener("dot").port()), 2),
        ] {
            let r = run_volley(&[
                &url,
                "--link",
                "delay=10ms",
                "--link-seed",
                "1",
                "-Q",
                "20",
                "-n",
                "4",
                "--ca",
                server.ca_str(),
            ]);
            let v = r.ok();
            check_accounting(v);
            assert_eq!(total(v, "answered"), 4, "{url}: {}", r.stderr);
            let ratio = v["connections"]["handshake_rtt_ratio_milli"]["p50_ns"].as_u64().unwrap() as f64 / 1000.0;
            assert_eq!(ratio.round() as i32, trips, "{url} chain {chain:?}: handshake {ratio} round trips");
        }
    }
    // Too large a chain is bad input.
    let out =
        run_cmd(Command::new(volley()).args(["serve", "--doq-port", "0", "--cert-chain-bytes", "1000000"]), RUN_WAIT);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--cert-chain-bytes"), "{}", out.stderr);
}

/// The value of `key=N` in `volley serve`'s stats line.
fn stat(stats: &str, key: &str) -> u64 {
    let tail = stats.split(&format!(" {key}=")).nth(1).unwrap_or_else(|| panic!("no {key} in: {stats}"));
    tail.split_whitespace().next().unwrap().parse().unwrap()
}

/// Address validation tokens (QUIC NEW_TOKEN, RFC 9000 section 8.1.3) with the 6,000-byte
/// chain of the test above, one query per fresh connection (no TLS resumption) behind the
/// link. The server sends tokens (`volley serve`'s default) and the client keeps them
/// (`--quic-tokens on`, `volley run`'s default): the first connection has none and takes 2
/// round trips, the later ones present the previous connection's and take 1, the server
/// counting each it took. A token that reached the client after its connection ended (quinn
/// drops a 1-RTT packet that arrives during the handshake, and the one query's connection may
/// close before the token is sent again) leaves a later connection without one: at most a
/// few, and then exactly those take 2 round trips. Without tokens on either side (client
/// `--quic-tokens off`, server `--quic-tokens 0`), and with a server that sends tokens but
/// takes none (`--quic-tokens-ignored`, seeds/002's resolvers), every handshake takes 2.
#[test]
fn a_quic_token_from_the_previous_connection_spares_the_anti_amplification_round_trip() {
    const N: u64 = 8;
    let run = |server: &Server, url: &str, tokens: &str| -> serde_json::Value {
        let r = run_volley(&[
            url,
            "--link",
            "delay=10ms",
            "--link-seed",
            "1",
            "-c",
            "1",
            "-n",
            &N.to_string(),
            "--conn-queries",
            "1",
            "--tls-resume",
            "off",
            "--quic-tokens",
            tokens,
            "--ca",
            server.ca_str(),
        ]);
        let v = r.ok().clone();
        check_accounting(&v);
        assert_eq!(total(&v, "answered"), N, "{url}: {}", r.stderr);
        assert_eq!(v["connections"]["opened"].as_u64(), Some(N), "{url}: a connection per query");
        assert_eq!(v["connections"]["resumed"].as_u64(), Some(0), "{url}: no TLS resumption");
        // The summary says how many presented one, where any did.
        let said = r.stdout.contains("presented a QUIC address validation token");
        assert_eq!(said, v["connections"]["quic_tokens"].as_u64() > Some(0), "{}", r.stdout);
        v
    };
    // Handshakes that presented a token, and those that took 1.5 round trips or more.
    let counts = |v: &serde_json::Value| -> (u64, u64) {
        let c = &v["connections"];
        let ratio = &c["handshake_rtt_ratio_milli"];
        let buckets = ratio["histogram"]["buckets"].as_array().unwrap();
        let two: u64 = buckets.iter().filter(|b| b[0].as_u64().unwrap() >= 1500).map(|b| b[1].as_u64().unwrap()).sum();
        (c["quic_tokens"].as_u64().unwrap(), two)
    };

    let mut server = Server::start_encrypted(&["--listen", "0.0.0.0", "--cert-chain-bytes", "6000"]);
    let doq = format!("quic://127.0.0.1:{}", server.listener("doq").port());
    let doh3 = format!("h3://127.0.0.1:{}/dns-query", server.listener("doh3").port());
    let mut presented = 0;
    for url in [&doq, &doh3] {
        let v = run(&server, url, "on");
        let (tokens, two) = counts(&v);
        // Kept and presented: every connection after the first, but for a token lost now and then.
        assert!((N / 2..N).contains(&tokens), "{url}: {tokens} of {N} handshakes presented a token");
        // The first (no token yet) took 2; so did any other without one, and only those.
        assert!(two >= 1 && two <= N - tokens, "{url}: {two} of {N} took 2 RTTs, {tokens} with a token");
        presented += tokens;
    }
    let v = run(&server, &doq, "off");
    assert_eq!(counts(&v), (0, N), "--quic-tokens off: no token, every handshake 2 RTTs");
    let stats = server.terminate();
    assert_eq!(stat(&stats, "quic_token_validated"), presented, "every token presented was taken: {stats}");

    for (flags, presents) in [(&["--quic-tokens", "0"][..], false), (&["--quic-tokens-ignored"][..], true)] {
        let mut args = vec!["--listen", "0.0.0.0", "--cert-chain-bytes", "6000"];
        args.extend_from_slice(flags);
        let mut server = Server::start_encrypted(&args);
        let url = format!("quic://127.0.0.1:{}", server.listener("doq").port());
        let (tokens, two) = counts(&run(&server, &url, "on"));
        assert_eq!(two, N, "{flags:?}: every handshake 2 RTTs");
        assert_eq!(tokens >= N / 2, presents, "{flags:?}: {tokens} handshakes presented a token");
        assert_eq!(stat(&server.terminate(), "quic_token_validated"), 0, "{flags:?}");
    }
}

/// `volley query --link`: the one query crosses the link both ways.
#[test]
fn query_behind_a_link() {
    let server = Server::start_with(&["--listen", "0.0.0.0"]);
    let url = format!("udp://127.0.0.1:{}", server.udp_addr().port());
    let mut cmd = Command::new(volley());
    let out = run_cmd(cmd.args(["query", &url, "example.test", "--link", "delay=10ms", "--link-seed", "1"]), RUN_WAIT);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("192.0.2.1"), "{}", out.stdout);
    let took: f64 = out.stdout.split(";; Query time: ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(took >= 20.0 * 0.999, "query time {took} ms through a 20 ms round trip");
    assert!(out.stdout.contains(";; SERVER: 10.213."), "{}", out.stdout);
    assert_eq!(link_counter(&out.stderr, "up", "out"), 1, "{}", out.stderr);
    assert_eq!(link_counter(&out.stderr, "down", "out"), 1, "{}", out.stderr);
}

/// `volley bench --link`: the embedded responder listens on the link's host end, so every
/// transport crosses the link. The handshake column reads in round trips of the emulated path:
/// TCP 1, DoT 2 and DoH 2 (TCP, then TLS 1.3), DoQ 1 (2 where the anti-amplification limit
/// stalls it). Each transport's run carries the link over its own run, per second too.
#[test]
fn bench_behind_a_link_counts_handshakes_in_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let mut cmd = Command::new(volley());
    cmd.args(["bench", "--link", "delay=10ms", "--link-seed", "3", "--transports", "udp,tcp,dot,doh2,doq"])
        .args(["-l", "2s", "-c", "4", "--progress", "never", "-o"])
        .arg(&json);
    let out = run_cmd(&mut cmd, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("behind the link"), "{}", out.stdout);
    assert!(out.stderr.contains("volley link: lateness"), "the link's lines at the end:\n{}", out.stderr);
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for (row, run) in doc["rows"].as_array().unwrap().iter().zip(doc["runs"].as_array().unwrap()) {
        let t = row["transport"].as_str().unwrap();
        check_accounting(run);
        assert!(total(run, "answered") > 0, "{t}");
        assert!(run["latency"]["min_ns"].as_u64().unwrap() >= 19_980_000, "{t}: below the link's 20 ms RTT");
        let l = &run["link"];
        assert_eq!((l["spec"].as_str(), l["seed"].as_u64()), (Some("delay=10ms"), Some(3)), "{t}");
        // This run's packets only: what the generator counted on the wire entered the link.
        let up = l["up"]["packets_in"].as_u64().unwrap();
        let wire = run["totals"]["wire"]["packets_out"].as_u64().unwrap();
        assert!(up.abs_diff(wire) <= wire / 10 + 10, "{t}: {up} packets into the link, {wire} on the wire: {l}");
        let series = l["series"].as_array().unwrap();
        assert!(!series.is_empty(), "{t}: the link per second");
        let per_s: u64 = series.iter().map(|s| s["up"]["packets_out"].as_u64().unwrap()).sum();
        let out = l["up"]["packets_out"].as_u64().unwrap();
        assert!(per_s <= out && per_s * 2 >= out, "{t}: {per_s} per second of {out}");
        let want: &[i64] = match t {
            "udp" => continue,
            "tcp" => &[1],
            "dot" | "doh2" => &[2],
            _ => &[1, 2],
        };
        let trips = row["handshake_rtts"].as_f64().unwrap_or_else(|| panic!("{t}: {row}"));
        assert!(want.contains(&(trips.round() as i64)), "{t}: handshake {trips} round trips, want {want:?}");
    }
}

/// An outage of 2 s in the middle of a 5 s run, on every transport (UDP, TCP, DoT, DoH/2,
/// DoH/3, DoQ): the link drops everything
/// in it (the seconds of the link's series say when), every query still has one fate, and the
/// run ends on time.
#[test]
fn an_outage_mid_run_balances_and_ends_on_time() {
    let server = Server::start_encrypted(&["--listen", "0.0.0.0"]);
    let port = |kind: &str| server.listener(kind).port();
    for url in [
        format!("udp://127.0.0.1:{}", port("udp")),
        format!("tcp://127.0.0.1:{}", port("tcp")),
        format!("tls://127.0.0.1:{}", port("dot")),
        format!("https://127.0.0.1:{}/dns-query", port("doh")),
        format!("h3://127.0.0.1:{}/dns-query", port("doh3")),
        format!("quic://127.0.0.1:{}", port("doq")),
    ] {
        let r = run_volley(&[
            &url,
            "--link",
            "delay=1ms outage=1.5s-3.5s",
            "--link-seed",
            "1",
            "-Q",
            "100",
            "-l",
            "5s",
            "--timeout",
            "1s",
            "--ca",
            server.ca_str(),
        ]);
        let v = r.ok();
        check_accounting(v);
        let l = &v["link"];
        let dropped = l["up"]["dropped_outage"].as_u64().unwrap() + l["down"]["dropped_outage"].as_u64().unwrap();
        assert!(dropped > 0, "{url}: {l}");
        assert!(total(v, "answered") >= 200, "{url}: answers before and after the outage: {}", r.stdout);
        assert!(total(v, "timed_out") + total(v, "failed") > 0, "{url}: the outage's queries");
        // The run ends on time: its 5 s and the last queries' timeout, with a little slack.
        let secs = v["duration_s"].as_f64().unwrap();
        assert!(secs < 5.0 + 1.0 + 1.0, "{url}: ran {secs} s");
        // The series: drops in the outage's seconds (1 to 3) only.
        for s in l["series"].as_array().unwrap() {
            let n = s["up"]["dropped_outage"].as_u64().unwrap() + s["down"]["dropped_outage"].as_u64().unwrap();
            let sec = s["second"].as_u64().unwrap();
            if !(1..=3).contains(&sec) {
                assert_eq!(n, 0, "{url}: drops in second {sec}: {s}");
            }
        }
        assert!(r.stdout.contains("link per s"), "{url}: {}", r.stdout);
    }
}

/// `volley limit --link`: the search runs behind the link, and each step's results carry it.
#[test]
fn limit_behind_a_link() {
    let server = Server::start_encrypted(&["--listen", "0.0.0.0"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("limit.json");
    let url = format!("udp://127.0.0.1:{}", server.listener("udp").port());
    let mut cmd = Command::new(volley());
    cmd.args(["limit", &url, "--link", "delay=5ms", "--start", "100", "--max", "200", "--step-duration", "1s"])
        .args(["--progress", "never", "-o"])
        .arg(&json);
    let out = run_cmd(&mut cmd, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = doc["searches"][0]["runs"].as_array().unwrap();
    assert!(!runs.is_empty());
    for r in runs {
        check_accounting(r);
        assert!(r["latency"]["min_ns"].as_u64().unwrap() >= 9_990_000, "through the link's 10 ms RTT");
        assert_eq!(r["link"]["spec"], "delay=5ms");
        assert!(r["link"]["up"]["packets_out"].as_u64().unwrap() >= total(r, "answered"));
    }
}

/// Real peers through the link against real servers: kdig and dnsperf (UDP and TCP) against
/// `volley serve` and against unbound, both listening on 0.0.0.0 on the host, through the 4g
/// profile's delay and jitter (its loss off, so that every query is answered).
#[test]
fn kdig_and_dnsperf_through_the_link_against_volley_serve_and_unbound() {
    require("kdig");
    require("dnsperf");
    let server = Server::start_with(&["--listen", "0.0.0.0", "--udp-port", "0", "--tcp-port", "0"]);
    let unbound = Unbound::start_on("0.0.0.0", UNBOUND_DATA);
    let dir = tempfile::tempdir().unwrap();
    let queries = dir.path().join("q.txt");
    std::fs::write(&queries, "www.example.test A\n").unwrap();
    for (name, udp, tcp) in [
        ("volley serve", server.udp_addr().port(), server.tcp_addr().port()),
        ("unbound", unbound.port(), unbound.port()),
    ] {
        let q = queries.display();
        let out = link(
            &["4g", "--seed", "5", "up:loss=0%"],
            &format!(
                "kdig @$VOLLEY_LINK_HOST -p {udp} +notcp +short www.example.test A && \
                 kdig @$VOLLEY_LINK_HOST -p {tcp} +tcp +short www.example.test A && \
                 dnsperf -s $VOLLEY_LINK_HOST -p {udp} -m udp -d {q} -n 20 -Q 50 && \
                 dnsperf -s $VOLLEY_LINK_HOST -p {tcp} -m tcp -d {q} -n 20 -Q 50"
            ),
        );
        assert_eq!(out.status.code(), Some(0), "{name}: stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
        assert_eq!(out.stdout.matches("192.0.2.1").count(), 2, "{name}: {}", out.stdout);
        let completed: Vec<&str> = out.stdout.lines().filter(|l| l.contains("Queries completed:")).collect();
        assert_eq!(completed.len(), 2, "{name}: {}", out.stdout);
        for l in completed {
            assert!(l.contains("Queries completed:    20 (100.00%)") || l.contains("20 (100.00%)"), "{name}: {l}");
        }
        // dnsperf's latency is the link's: the average at least its 53.3 ms.
        for l in out.stdout.lines().filter(|l| l.contains("Average Latency (s):")) {
            let avg: f64 = l.split_whitespace().nth(3).unwrap().parse().unwrap();
            assert!(avg >= 0.0533 * 0.999, "{name}: {l}");
        }
    }
}

/// DoT over a lossy link: the kernel retransmits what the link dropped (TCP_INFO's count in
/// the results' `wire.retransmits`) and every query still has exactly one fate.
#[test]
fn dot_over_a_lossy_link_retransmits_and_balances() {
    let server = Server::start_encrypted(&["--listen", "0.0.0.0"]);
    let url = format!("tls://127.0.0.1:{}", server.listener("dot").port());
    let r = run_volley(&[
        &url,
        "--link",
        "delay=5ms loss=5%",
        "--link-seed",
        "2",
        "-Q",
        "200",
        "-l",
        "3s",
        "--timeout",
        "2s",
        "--ca",
        server.ca_str(),
    ]);
    let v = r.ok();
    check_accounting(v);
    let l = &v["link"];
    let dropped = l["up"]["dropped_loss"].as_u64().unwrap() + l["down"]["dropped_loss"].as_u64().unwrap();
    assert!(dropped > 0, "{l}");
    let retrans = v["totals"]["wire"]["retransmits"].as_u64().unwrap_or(0);
    assert!(retrans > 0, "TCP_INFO retransmissions: {:#}", v["totals"]["wire"]);
    // TCP recovers: (nearly) every query is answered, each counted once.
    assert!(total(v, "answered") >= total(v, "issued") * 9 / 10, "{:#}", v["totals"]);
}

/// IPv6 on the link: the command gets `$VOLLEY_LINK_HOST6`, and kdig reaches a server on `::`
/// over it (UDP and TCP); `volley run --link` reaches `[::1]` at the link's IPv6 host end,
/// through the link's delay.
#[test]
fn ipv6_crosses_the_link() {
    ipv6(&[]);
}

#[test]
fn ipv6_crosses_the_link_over_xdp() {
    ipv6(XDP);
}

fn ipv6(dev: &[&str]) {
    let server = Server::start_with(&["--listen", "::", "--udp-port", "0", "--tcp-port", "0"]);
    let (u, t) = (server.udp_addr().port(), server.tcp_addr().port());
    let out = link_on(
        dev,
        &["delay=5ms"],
        &format!(
            "echo \"host6=$VOLLEY_LINK_HOST6 local6=$VOLLEY_LINK_LOCAL6\" && \
             kdig @$VOLLEY_LINK_HOST6 -p {u} +notcp +short www.example.test A && \
             kdig @$VOLLEY_LINK_HOST6 -p {t} +tcp +short www.example.test A"
        ),
    );
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("host6=fd76:6c69:6e6b::") && out.stdout.contains(":1 local6="), "{}", out.stdout);
    assert_eq!(out.stdout.matches("192.0.2.1").count(), 2, "{}", out.stdout);
    assert!(link_counter(&out.stderr, "up", "out") >= 4, "{}", out.stderr);
    // `--link` takes its device from VOLLEY_LINK_DEVICE.
    let mut cmd = Command::new(volley());
    if dev == XDP {
        cmd.env("VOLLEY_LINK_DEVICE", "xdp");
    }
    let r = run_volley_in(cmd, &[&format!("udp://[::1]:{u}"), "--link", "delay=5ms", "-Q", "20", "-n", "20"]);
    let want = if dev == XDP { "device xdp" } else { "device tun" };
    assert!(r.stderr.contains(want), "{want}: {}", r.stderr);
    let v = r.ok();
    check_accounting(v);
    assert_eq!(total(v, "answered"), 20, "{}", r.stderr);
    assert!(r.stderr.contains(" and fd76:6c69:6e6b::"), "the link's IPv6 host end: {}", r.stderr);
    let addr = v["target"]["address"].as_str().unwrap_or_default();
    assert!(addr.starts_with("[fd76:6c69:6e6b::"), "measured at {addr}");
    assert!(ms(v, "min_ns") >= 10.0 * 0.999, "through the link's 10 ms: {}", ms(v, "min_ns"));
    assert!(v["link"]["up"]["packets_out"].as_u64().unwrap() >= 20, "{}", v["link"]);
}

/// The field sums of the link's per-second rows of a run, against its totals: every counter of
/// each direction, and the lateness (each row's histogram's count, against the run's).
fn series_add_up(l: &serde_json::Value, what: &str) {
    let series = l["series"].as_array().unwrap_or_else(|| panic!("{what}: no series: {l}"));
    for dir in ["up", "down"] {
        for field in [
            "packets_in",
            "bytes_in",
            "packets_out",
            "bytes_out",
            "dropped_loss",
            "dropped_queue",
            "dropped_outage",
            "reordered",
            "duplicated",
        ] {
            let per_s: u64 = series.iter().map(|s| s[dir][field].as_u64().unwrap_or_else(|| panic!("{s}"))).sum();
            assert_eq!(Some(per_s), l[dir][field].as_u64(), "{what}: {dir}.{field}, the rows' sum and the total");
        }
    }
    let late: u64 = series
        .iter()
        .map(|s| {
            s["lateness"]["histogram"]["buckets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b[1].as_u64().unwrap())
                .sum::<u64>()
        })
        .sum();
    assert_eq!(Some(late), l["lateness"]["count"].as_u64(), "{what}: the rows' lateness counts");
}

/// The link per second: each row carries what came in and went out (packets and bytes), the
/// drops by cause, the reordered and duplicated packets and the lateness, and the rows add up
/// to the run's totals exactly (the last row holds what came after the last whole second);
/// `volley merge` keeps them exact.
#[test]
fn the_link_per_second_adds_up_to_its_totals_and_merges_exactly() {
    let server = Server::start_with(&["--listen", "0.0.0.0"]);
    let url = format!("udp://127.0.0.1:{}", server.udp_addr().port());
    let r = run_volley(&[
        &url,
        "--link",
        "delay=5ms jitter=3ms dup=2% loss=1%",
        "--link-seed",
        "4",
        "-Q",
        "300",
        "-l",
        "3s",
        "--timeout",
        "1s",
    ]);
    let v = r.ok();
    check_accounting(v);
    let l = &v["link"];
    for dir in ["up", "down"] {
        for field in ["reordered", "duplicated", "dropped_loss", "bytes_in"] {
            assert!(l[dir][field].as_u64().unwrap() > 0, "{dir}.{field} > 0 (jitter reorders, dup, loss): {l}");
        }
    }
    assert!(l["series"].as_array().unwrap().len() >= 3, "{l}");
    series_add_up(l, "the run");
    // Merged with itself: every figure twice, the rows still the totals.
    let merged = r.dir.path().join("merged.json");
    let mut cmd = Command::new(volley());
    cmd.arg("merge").arg("-o").arg(&merged).arg(&r.output).arg(&r.output);
    let out = run_cmd(&mut cmd, RUN_WAIT);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    let m = read_results(&merged).unwrap();
    let ml = &m["link"];
    assert_eq!(ml["up"]["packets_in"].as_u64(), l["up"]["packets_in"].as_u64().map(|n| 2 * n), "{ml}");
    assert_eq!(ml["lateness"]["count"].as_u64(), l["lateness"]["count"].as_u64().map(|n| 2 * n));
    series_add_up(ml, "the merged run");
    for (a, b) in ml["series"].as_array().unwrap().iter().zip(l["series"].as_array().unwrap()) {
        for k in ["lateness_p99_ns", "lateness_max_ns"] {
            assert_eq!(a[k], b[k], "{k}: a second merged with itself: {a}");
        }
    }
}

/// An emulator that falls behind is said in the results: a `volley run --link` stopped
/// (SIGSTOP) for 600 ms mid-run, its forwarder with it, sends every packet it held (5 % of the
/// run's: a 200 ms delay each way in a 4 s run) hundreds of ms after its due time, and the
/// results carry the link's lateness warning.
#[test]
fn an_emulator_that_falls_behind_is_warned_of() {
    use std::io::Read;
    let server = Server::start_with(&["--listen", "0.0.0.0"]);
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("r.json");
    let mut child = Command::new(volley())
        .args(["run", &format!("udp://127.0.0.1:{}", server.udp_addr().port())])
        .args(["--link", "delay=200ms", "--link-seed", "1", "-Q", "200", "-l", "4s", "--timeout", "3s"])
        .args(["--progress", "always", "-o"])
        .arg(&out_file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    // The progress line of the first whole second: the load and the link are running.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = thread::spawn(move || {
        let (mut all, mut buf, mut told) = (Vec::new(), [0u8; 4096], false);
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            if !told && all.windows(5).any(|w| w == b"\r\x1b[2K") {
                told = tx.send(()).is_ok();
            }
        }
        String::from_utf8_lossy(&all).into_owned()
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("a progress line");
    signal(&child, libc::SIGSTOP);
    thread::sleep(Duration::from_millis(600));
    signal(&child, libc::SIGCONT);
    let status = wait_bounded(&mut child, RUN_WAIT).expect("volley run ends");
    let stderr = reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let v = read_results(&out_file).expect("results");
    check_accounting(&v);
    let p99 = v["link"]["lateness"]["p99_ns"].as_u64().unwrap();
    assert!(p99 > 100_000, "p99 lateness {p99} ns after a stop of 600 ms");
    let warnings: Vec<&str> = v["warnings"].as_array().unwrap().iter().filter_map(|w| w.as_str()).collect();
    assert!(
        warnings.iter().any(|w| w.starts_with("the link's emulator fell behind: p99 lateness")),
        "the link's warning in {warnings:?}"
    );
    assert!(stderr.contains("(warning: the link's emulator fell behind"), "{stderr}");
}

/// A target the namespace cannot reach through the link: a server on 127.0.0.1 only (its
/// address is taken to the link's host end, where nothing listens), over UDP, TCP and DoT and
/// with `volley query`, and an address beyond the link (no route). One error line, which names
/// the link and says where to listen, and exit 2.
#[test]
fn an_unreachable_target_behind_the_link_is_one_line_naming_the_link() {
    let server = Server::start_encrypted(&["--listen", "127.0.0.1"]);
    let error_line = |what: &str, code: Option<i32>, stderr: &str| -> String {
        assert_eq!(code, Some(2), "{what}: {stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("volley: error:")).collect();
        assert_eq!(errors.len(), 1, "{what}: one error line:\n{stderr}");
        // Beside it, only the link's own lines.
        for l in stderr.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("volley: error:")) {
            assert!(l.starts_with("volley link: "), "{what}: {l}");
        }
        errors[0].to_string()
    };
    for url in [
        server.udp_url(),
        server.tcp_url(),
        format!("tls://{}", server.listener("dot")),
        format!("quic://{}", server.listener("doq")),
    ] {
        let r = run_volley(&[&url, "--link", "delay=1ms", "-n", "5", "--ca", server.ca_str()]);
        let e = error_line(&url, r.status.code(), &r.stderr);
        assert!(e.starts_with("volley: error: --link 'delay=1ms': "), "{url}: {e}");
        assert!(e.contains("listen on 0.0.0.0") && e.contains("127.0.0.1 only"), "{url}: {e}");
        assert!(e.contains("10.213."), "{url}: the link's host end in {e}");
        assert!(!r.output.exists(), "{url}: no results");
    }
    let mut cmd = Command::new(volley());
    cmd.args(["query", "--link", "delay=1ms", &server.udp_url(), "example.test"]);
    let out = run_cmd(&mut cmd, RUN_WAIT);
    let e = error_line("query", out.status.code(), &out.stderr);
    assert!(e.contains("--link 'delay=1ms'") && e.contains("listen on 0.0.0.0"), "{e}");
    // No route: only the link's host end is reachable from its namespace.
    let r = run_volley(&["udp://192.0.2.7:53", "--link", "delay=1ms", "-n", "5"]);
    let e = error_line("192.0.2.7", r.status.code(), &r.stderr);
    assert!(e.contains("only its host end 10.213.") && e.contains("listen on 0.0.0.0"), "{e}");
}

/// A bottleneck under load: `up:rate=200kbit,queue=20` offered about three times its rate.
/// Packets wait in the queue (its queueing delay, and the per-second `queued`, above 0), the
/// wait is never more than the 20 packets ahead take to send, and what the queue has no room
/// for is dropped and counted (each dropped query one of the run's timeouts or unanswered).
#[test]
fn a_loaded_bottleneck_queues_and_drops() {
    let server = Server::start_with(&["--listen", "0.0.0.0"]);
    let url = format!("udp://127.0.0.1:{}", server.udp_addr().port());
    let r = run_volley(&[
        &url,
        "--link",
        "up:rate=200kbit,queue=20",
        "--link-seed",
        "1",
        "-Q",
        "1000",
        "-l",
        "3s",
        "--timeout",
        "1s",
    ]);
    let v = r.ok();
    check_accounting(v);
    let l = &v["link"];
    let up = &l["up"];
    let dropped = up["dropped_queue"].as_u64().unwrap();
    assert!(dropped > 0, "the queue's drops: {up}");
    assert_eq!(l["down"]["dropped_queue"].as_u64(), Some(0), "no queue on the way down");
    // What left is the rate's share of what came: about a third.
    let (pin, pout) = (up["packets_in"].as_u64().unwrap(), up["packets_out"].as_u64().unwrap());
    assert!(pout < pin / 2, "{pout} of {pin} packets through a bottleneck offered 3 times its rate");
    assert!(total(v, "timed_out") + total(v, "failed") >= dropped, "each dropped query unanswered: {:#}", v["totals"]);
    let qd = &up["queue_delay"];
    assert!(qd["p50_ns"].as_u64().unwrap() > 0, "queueing delay: {qd}");
    // The emulator's own bound: the 20 packets ahead, at most, at 200 kbit/s each.
    let largest = (up["bytes_in"].as_u64().unwrap() / pin.max(1)) as f64 * 2.0;
    let bound = 21.0 * largest * 8.0 / 200_000.0 * 1e9;
    assert!((qd["max_ns"].as_u64().unwrap() as f64) < bound, "queueing delay max {qd} above {bound} ns");
    let series = l["series"].as_array().unwrap();
    assert!(series.iter().any(|s| s["up"]["queued"].as_u64().unwrap() > 0), "per second, queued > 0: {series:?}");
    assert!(series.iter().any(|s| s["up"]["queue_delay_p99_ns"].as_u64().unwrap() > 0), "{series:?}");
    assert!(series.iter().all(|s| s["up"]["queued"].as_u64().unwrap() <= 20), "never above the limit: {series:?}");
    let per_s: u64 = series.iter().map(|s| s["up"]["dropped_queue"].as_u64().unwrap()).sum();
    assert_eq!(per_s, dropped, "the rows' drops and the total");
    assert!(r.stdout.contains("link"), "{}", r.stdout);
}
