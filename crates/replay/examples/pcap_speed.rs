//! Read speed of the extraction: writes a capture of N packets (default 1,000,000: queries from
//! 10,000 clients over UDP and their responses, Ethernet, microsecond pcap) and times
//! `Extractor` over it, then the reading of the clients file.
//!
//! `cargo run --release -p volley-replay --example pcap_speed [PACKETS] [DIR]`
//!
//! Besides the wall time, the extraction's CPU time (the thread's time on a CPU, from
//! /proc/thread-self/schedstat on Linux): on a busy machine the wall time mostly measures the
//! others.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::time::Instant;

use volley_replay::clients::AtomicFile;
use volley_replay::{ClientsFile, Extractor, Options};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(1_000_000, |a| a.parse().expect("PACKETS"));
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| std::env::temp_dir().display().to_string()));
    let cap = dir.join("volley-speed.pcap");
    let t = Instant::now();
    {
        let mut w = BufWriter::with_capacity(1 << 20, File::create(&cap).unwrap());
        w.write_all(&0xa1b2c3d4u32.to_le_bytes()).unwrap();
        w.write_all(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        w.write_all(&65535u32.to_le_bytes()).unwrap();
        w.write_all(&1u32.to_le_bytes()).unwrap();
        let mut x: u64 = 88172645463325252;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let client = (x % 10_000) as u32;
            let name = format!("n{}.example{}.test", x % 5000, client % 7);
            let mut dns =
                vec![(i >> 8) as u8, i as u8, if i % 2 == 1 { 0x81 } else { 0x01 }, 0, 0, 1, 0, 0, 0, 0, 0, 1];
            for l in name.split('.') {
                dns.push(l.len() as u8);
                dns.extend_from_slice(l.as_bytes());
            }
            dns.extend_from_slice(&[0, 0, 1, 0, 1, 0, 0, 41, 4, 208, 0, 0, 0x80, 0, 0, 0]);
            let cip = [10, (client >> 16) as u8, (client >> 8) as u8, client as u8];
            let sip = [10, 255, 0, 53];
            let (src, dst, sp, dp) = if i % 2 == 1 { (sip, cip, 53u16, 40000u16) } else { (cip, sip, 40000, 53) };
            let mut f = vec![0u8; 12];
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
            f.extend_from_slice(&((28 + dns.len()) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0, 0, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&src);
            f.extend_from_slice(&dst);
            f.extend_from_slice(&sp.to_be_bytes());
            f.extend_from_slice(&dp.to_be_bytes());
            f.extend_from_slice(&((8 + dns.len()) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0]);
            f.extend_from_slice(&dns);
            let ts = 1_700_000_000_000_000u64 + i * 20; // 50k packets/s
            w.write_all(&((ts / 1_000_000) as u32).to_le_bytes()).unwrap();
            w.write_all(&((ts % 1_000_000) as u32).to_le_bytes()).unwrap();
            w.write_all(&(f.len() as u32).to_le_bytes()).unwrap();
            w.write_all(&(f.len() as u32).to_le_bytes()).unwrap();
            w.write_all(&f).unwrap();
        }
        w.flush().unwrap();
    }
    let size = std::fs::metadata(&cap).unwrap().len();
    eprintln!("wrote {} ({n} packets, {size} bytes) in {:.2?}", cap.display(), t.elapsed());

    let out = dir.join("volley-speed.clients");
    let t = Instant::now();
    let cpu = cpu_ns();
    let mut ex = Extractor::new(Options::default());
    ex.read_capture(BufReader::with_capacity(1 << 20, File::open(&cap).unwrap())).unwrap();
    let read = t.elapsed();
    let cpu = cpu_ns().zip(cpu).map(|(b, a)| b - a);
    let f = AtomicFile::with_capacity(&out, 1 << 20).unwrap();
    let (report, f) = ex.write(f).unwrap();
    f.commit().unwrap();
    let all = t.elapsed();
    if let Some(cpu) = cpu {
        println!("extract CPU: {:.1} ms ({:.0} ns per packet)", cpu as f64 / 1e6, cpu as f64 / report.packets as f64);
    }
    println!(
        "extract: {} packets in {:.3?} ({:.2} M packets/s, {:.0} MB/s); with writing {:.3?}; {} queries, {} clients, clients file {} bytes ({:.1} bytes/query), client memory peak {} KiB",
        report.packets,
        read,
        report.packets as f64 / read.as_secs_f64() / 1e6,
        size as f64 / read.as_secs_f64() / 1e6,
        all,
        report.queries,
        report.per_client.len(),
        report.output_bytes,
        report.output_bytes as f64 / report.queries as f64,
        report.client_memory / 1024
    );
    let t = Instant::now();
    let mut r = ClientsFile::open(&out).unwrap();
    let mut q = 0;
    for c in r.by_ref() {
        q += c.unwrap().queries.len();
    }
    let d = t.elapsed();
    println!("read back: {q} queries in {d:.3?} ({:.2} M queries/s)", q as f64 / d.as_secs_f64() / 1e6);
    let _ = std::fs::remove_file(&cap);
    let _ = std::fs::remove_file(&out);
}

/// This thread's time on a CPU so far, in nanoseconds (Linux).
fn cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}
