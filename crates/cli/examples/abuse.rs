//! The abuse harness: runs one attack on a DNS server for a while and prints one JSON line of
//! what it did (see `tests/common/abuse.rs`, which the abuse tests share, and
//! `bench/abuse_campaign.sh`, which runs each attack against volley serve, unbound and dnsdist).
//!
//! ```text
//! cargo run --example abuse -- ATTACK PROTO ADDR [--conns N] [--secs S] [--interval-ms MS] [--sources K]
//! ```
//! ATTACK: slowloris, idle, stall, rapid-reset, continuation, big-headers, quic-streams,
//! long-url, udp-garbage, 0rtt-replay (dot, doq, doh3). PROTO: udp, tcp, dot, doh1, doh2, doq,
//! doh3. Loopback only.

#[path = "../tests/common/abuse.rs"]
mod abuse;

use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: abuse ATTACK PROTO ADDR [--conns N] [--secs S] [--interval-ms MS] [--sources K]";
    if args.len() < 3 {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let fail = |what: &str| -> ! {
        eprintln!("abuse: error: {what}\n{usage}");
        std::process::exit(2)
    };
    let attack: abuse::Attack = args[0].parse().unwrap_or_else(|e: String| fail(&e));
    let proto: abuse::Proto = args[1].parse().unwrap_or_else(|e: String| fail(&e));
    let target: std::net::SocketAddr = args[2].parse().unwrap_or_else(|_| fail("ADDR: expected IP:PORT"));
    if !target.ip().is_loopback() {
        fail("ADDR must be a loopback address");
    }
    let mut plan = abuse::Plan {
        attack,
        proto,
        target,
        conns: 100,
        duration: Duration::from_secs(20),
        interval: Duration::from_millis(1000),
        sources: 1,
    };
    let mut it = args[3..].iter();
    while let Some(flag) = it.next() {
        let v: u64 =
            it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| fail(&format!("{flag}: expected a number")));
        match flag.as_str() {
            "--conns" => plan.conns = v as usize,
            "--secs" => plan.duration = Duration::from_secs(v),
            "--interval-ms" => plan.interval = Duration::from_millis(v),
            "--sources" => plan.sources = v.clamp(1, 250) as u8,
            _ => fail(&format!("unknown flag {flag}")),
        }
    }
    raise_open_files();
    let tally = abuse::run(plan.clone());
    println!("{}", tally.json(&plan));
}

/// Raises the soft limit of open files to the hard one (many connections).
fn raise_open_files() {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain getrlimit/setrlimit on a struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}
