//! Runs the responder for a while without the CLI, for quick measurements:
//! `cargo run --release -p volley-responder --example responder -- PORT THREADS SECONDS [CA_OUT]`
//! (defaults: 5353, 1, 30). UDP and TCP on PORT; with CA_OUT also DoT on PORT+1, DoH (and
//! DoH/3) on PORT+2, DoQ on PORT+3, the generated CA written to CA_OUT. Prints the listening
//! lines, then the stats line when done.

use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5353);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(30);
    let ca_out = args.next();
    let mut config =
        volley_responder::ResponderConfig { udp_port: Some(port), tcp_port: Some(port), threads, ..Default::default() };
    if let Some(ca) = ca_out {
        config.dot_port = Some(port + 1);
        config.doh_port = Some(port + 2);
        config.doh3_port = Some(port + 2);
        config.doq_port = Some(port + 3);
        config.tls.ca_out = Some(ca.into());
    }
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
