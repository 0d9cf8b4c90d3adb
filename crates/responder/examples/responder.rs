//! Runs the responder for a while without the CLI, for quick measurements:
//! `cargo run --release -p volley-responder --example responder -- PORT THREADS SECONDS`
//! (defaults: 5353, 1, 30). Prints the listening lines, then the stats line when done.

use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5353);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(30);
    let config =
        volley_responder::ResponderConfig { udp_port: Some(port), tcp_port: Some(port), threads, ..Default::default() };
    let r = match volley_responder::start(config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("responder: {e}");
            std::process::exit(2);
        }
    };
    for (t, a) in r.addresses() {
        println!("listening {t} {a}");
    }
    std::thread::sleep(Duration::from_secs(secs));
    eprintln!("{}", r.stats());
    r.stop();
}
