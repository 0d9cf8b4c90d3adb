//! The answer engine alone on a large zone: nanoseconds of CPU (the thread's) per answer for names of the
//! zone, for synthesised names and for the zone's negative answers, answered in batches as the
//! UDP loop answers a `recvmmsg` batch (`Answerer::prefetch` over the batch, then each query).
//! No sockets: the kernel's share of an answer (most of it) is the same for every kind, so this
//! shows what the zone itself costs, without the noise a loaded machine adds to a whole server.
//!
//! ```text
//! cargo run --release -p volley-responder --example zone_answer -- ZONE_FILE HOSTS [BATCH] [ROUNDS]
//! ```
//!
//! ZONE_FILE: a zone `zone.test.` with A records `h1` .. `hHOSTS` and a wildcard below the apex
//! that has no AAAA, as `bench/zone_1m.sh` writes it. Asked, 100,000 of each in a random order:
//! `hN.zone.test A` (its A record), `hN.synth.test A` (synthesised), `xN.zone.test AAAA` (the
//! wildcard's NODATA), `a.hN.zone.test A` (NXDOMAIN). BATCH (default 64): queries per batch.
//! ROUNDS (default 5): the kinds in turn, each round; the median is printed. POLLUTE_KIB (env,
//! default 0): octets written between two batches, as the kernel's receive and send paths
//! would push the zone's lines out of the caches. ONLY (env): the index of one kind (0
//! synthesised, 1 zone A, 2 wildcard NODATA, 3 NXDOMAIN) to run alone, the others reading 1.0
//! (for a profiler: `ONLY=1 perf record ...`).

use std::time::Instant;

use volley_responder::{load_zones, AnswerConfig, Answerer, Transport};
use volley_wire::{Name, QType, QueryOptions, QueryTemplate};

/// A kind of name asked: what it is, the name for a pick, the type asked.
type Kind = (&'static str, fn(u64) -> String, u16);

/// CPU time of this thread, ns: time on other work while preempted does not count.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the one passed.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: zone_answer ZONE_FILE HOSTS [BATCH] [ROUNDS]");
        std::process::exit(2);
    }
    let hosts: u64 = args[2].parse().expect("HOSTS: a number");
    let batch: usize = args.get(3).map_or(64, |b| b.parse().expect("BATCH: a number"));
    let rounds: usize = args.get(4).map_or(5, |r| r.parse().expect("ROUNDS: a number"));
    let pollute_kib: usize = std::env::var("POLLUTE_KIB").ok().map_or(0, |p| p.parse().expect("POLLUTE_KIB"));
    let only: Option<usize> = std::env::var("ONLY").ok().map(|o| o.parse().expect("ONLY: a kind's index"));
    let t = Instant::now();
    let zones = load_zones(&[args[1].clone().into()]).unwrap_or_else(|e| {
        eprintln!("zone_answer: {e}");
        std::process::exit(2)
    });
    eprintln!("loaded in {:.2} s", t.elapsed().as_secs_f64());
    let answerer = Answerer::new(AnswerConfig { zones: Some(std::sync::Arc::new(zones)), ..AnswerConfig::default() });

    // The same random picks for every kind (xorshift, fixed seed).
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let picks: Vec<u64> = (0..100_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1 + x % hosts
        })
        .collect();
    let kinds: [Kind; 4] = [
        ("synthesised", |n| format!("h{n}.synth.test"), 1),
        ("zone A", |n| format!("h{n}.zone.test"), 1),
        ("wildcard NODATA", |n| format!("x{n}.zone.test"), 28),
        ("NXDOMAIN", |n| format!("a.h{n}.zone.test"), 1),
    ];
    let queries: Vec<Vec<Vec<u8>>> = kinds
        .iter()
        .map(|(_, name, qtype)| {
            picks
                .iter()
                .map(|&n| {
                    let mut q = Vec::new();
                    let name: Name = name(n).parse().expect("a name");
                    QueryTemplate::new(&name, QType(*qtype), QueryOptions::default()).write(n as u16, &mut q);
                    q
                })
                .collect()
        })
        .collect();

    let mut outs: Vec<Vec<u8>> = (0..batch).map(|_| Vec::with_capacity(1232)).collect();
    let mut junk = vec![0u8; pollute_kib * 1024];
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    let mut sum = 0usize;
    for _ in 0..rounds {
        for (k, qs) in queries.iter().enumerate() {
            if only.is_some_and(|o| o != k) {
                ns[k].push(1.0);
                continue;
            }
            let t = thread_cpu_ns();
            for chunk in qs.chunks(batch) {
                answerer.prefetch(chunk.iter().map(|q| &q[..]));
                for (q, out) in chunk.iter().zip(outs.iter_mut()) {
                    answerer.answer(q, Transport::Udp, out);
                    sum += out.len();
                }
                for b in junk.iter_mut().step_by(64) {
                    *b = b.wrapping_add(1);
                }
            }
            ns[k].push((thread_cpu_ns() - t) as f64 / qs.len() as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let base = median(&mut ns[0].clone());
    let base_min = ns[0].iter().copied().fold(f64::MAX, f64::min);
    println!("batch {batch}, {rounds} rounds, {pollute_kib} KiB written between batches ({sum} octets answered)");
    for (k, (kind, _, _)) in kinds.iter().enumerate() {
        let (min, max) = (ns[k].iter().copied().fold(f64::MAX, f64::min), ns[k].iter().copied().fold(0.0, f64::max));
        let m = median(&mut ns[k]);
        println!(
            "{kind:16} {m:7.1} ns per answer (min {min:.1}, max {max:.1}), {:.2} of synthesised (min: {:.2})",
            m / base,
            min / base_min
        );
    }
    std::hint::black_box(&junk);
}
