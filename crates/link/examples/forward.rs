//! The forwarder's capacity alone, without the engine: a closed loop of UDP datagrams from a
//! thread in the link's namespace to an echo on the host's end, through a link of SPEC.
//!
//!   cargo run --release -p volley-link --example forward -- [SPEC] [IN_FLIGHT] [SECS] [ECHO_CORE]
//!
//! The process (and so the forwarder thread and the sender) is pinned to core 0 and the echo to
//! ECHO_CORE (default 1), as bench/link_capacity.sh pins the generator and the server. Prints
//! round trips per second, packets per second forwarded, the forwarder's CPU per packet and its
//! lateness. Needs root and /dev/net/tun.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use volley_link::{spec, Link};

fn pin(core: usize) {
    // SAFETY: a cpu_set_t we own, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let spec_s = args.first().cloned().unwrap_or_default();
    let inflight: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let secs: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let echo_core: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    pin(0);
    let items: Vec<String> = spec_s.split_whitespace().map(str::to_string).collect();
    let cfg = spec::parse(&items).expect("spec");
    let link = Link::start(cfg, 1).expect("link (needs root and /dev/net/tun)");
    let echo = UdpSocket::bind(SocketAddr::new(link.addrs.host.into(), 0)).unwrap();
    echo.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let to = echo.local_addr().unwrap();
    let done = AtomicBool::new(false);
    let mut trips = 0u64;
    let mut elapsed = Duration::ZERO;
    std::thread::scope(|s| {
        let (echo, done) = (&echo, &done);
        s.spawn(move || {
            pin(echo_core);
            let mut buf = [0u8; 2048];
            while !done.load(Ordering::Relaxed) {
                if let Ok((n, from)) = echo.recv_from(&mut buf) {
                    let _ = echo.send_to(&buf[..n], from);
                }
            }
        });
        let link = &link;
        let (t, e) = s
            .spawn(move || {
                link.enter().unwrap();
                pin(0);
                let tx = UdpSocket::bind("0.0.0.0:0").unwrap();
                tx.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
                let buf = [7u8; 64];
                let mut rb = [0u8; 2048];
                for _ in 0..inflight {
                    tx.send_to(&buf, to).unwrap();
                }
                let start = Instant::now();
                let mut trips = 0u64;
                while start.elapsed().as_secs_f64() < secs {
                    // A timeout (a datagram lost): send another all the same, to keep the loop full.
                    if tx.recv_from(&mut rb).is_ok() {
                        trips += 1;
                    }
                    let _ = tx.send_to(&buf, to);
                }
                (trips, start.elapsed())
            })
            .join()
            .unwrap();
        trips = t;
        elapsed = e;
        done.store(true, Ordering::Relaxed);
    });
    let r = link.finish().unwrap();
    let pkts = r.up.packets_out + r.down.packets_out;
    let e = elapsed.as_secs_f64();
    println!(
        "spec '{spec_s}' in flight {inflight}: {:.0} round trips/s, {:.0} packets/s forwarded, forwarder CPU {:.3} s ({:.2} us/packet over {:.1} s), lateness p50 {:.1} p99 {:.1} max {:.1} us, realtime {}",
        trips as f64 / e,
        pkts as f64 / r.elapsed.as_secs_f64(),
        r.cpu.as_secs_f64(),
        r.cpu.as_secs_f64() * 1e6 / pkts.max(1) as f64,
        r.elapsed.as_secs_f64(),
        r.lateness.quantile(0.5) as f64 / 1e3,
        r.lateness.quantile(0.99) as f64 / 1e3,
        r.lateness.quantile(1.0) as f64 / 1e3,
        r.realtime
    );
}
