//! `volley query`: one query, the response printed as dig and kdig print it.

use std::time::Duration;

use clap::Args;
use volley_transport::probe::{exchange_with, OneShotError};
use volley_transport::{LaneOptions, Scheme, Target};
use volley_wire::{Edns, Header, Name, QType, QueryOptions, QueryTemplate};

use crate::args::{parse_duration, TlsArgs};
use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  volley query udp://127.0.0.1:5353 www.example.test
  volley query tcp://[::1]:53 example.test AAAA --dnssec
  volley query udp://127.0.0.1:5353 size-3000.test TXT      (truncated over UDP: retried over TCP)

Exit status: 0 a response came (whatever its RCODE); 1 no response in time; 2 bad input or
nothing listening at the target.";

#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct QueryArgs {
    /// Server to ask: udp://, tcp://, tls:// (DoT), https://HOST/PATH (DoH, --http 1.1|2|3),
    /// h3:// (DoH over HTTP/3) or quic:// (DoQ).
    #[arg(value_name = "TARGET")]
    pub target: String,

    /// Name to look up.
    #[arg(value_name = "NAME")]
    pub name: String,

    /// Query type (A, AAAA, TXT, MX, ... or TYPE123).
    #[arg(value_name = "TYPE", default_value = "A")]
    pub qtype: String,

    /// Wait this long for the response.
    #[arg(short = 't', long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Send no EDNS(0) OPT record.
    #[arg(long)]
    pub no_edns: bool,

    /// EDNS(0) UDP payload size to advertise.
    #[arg(long, value_name = "BYTES", default_value_t = 1232)]
    pub edns_size: u16,

    /// Set the DNSSEC OK (DO) bit.
    #[arg(long)]
    pub dnssec: bool,

    /// Clear the Recursion Desired (RD) bit.
    #[arg(long)]
    pub no_rd: bool,

    /// Print a truncated UDP answer as it is instead of retrying over TCP.
    #[arg(long)]
    pub ignore_tc: bool,

    /// Message ID to use [default: a random one, as dig and kdig pick].
    #[arg(long, value_name = "ID")]
    pub id: Option<u16>,

    #[command(flatten)]
    pub tls: TlsArgs,

    /// Ask from behind an emulated network link (docs/link.md): the items of `volley link`,
    /// space-separated (e.g. "4g", "delay=20ms"). A target on 127.0.0.1 is reached at the
    /// link's host end: it must listen on 0.0.0.0.
    #[arg(long, value_name = "SPEC")]
    pub link: Option<String>,

    /// Seed of the link's random choices [default: a random one, printed].
    #[arg(long, value_name = "N", requires = "link")]
    pub link_seed: Option<u64>,
}

pub fn run(a: QueryArgs) -> CliResult {
    let mut target: Target = a.target.parse().map_err(CliError::usage)?;
    let link = match &a.link {
        Some(spec) => Some(super::link::behind_link(spec, a.link_seed, vec![&mut target])?),
        None => None,
    };
    let answered = ask(&a, target).map_err(|e| match &link {
        Some(l) => l.unreachable(e),
        None => e,
    });
    if let Some(link) = link {
        link.finish()?;
    }
    answered
}

fn ask(a: &QueryArgs, target: Target) -> CliResult {
    let name: Name = a.name.parse().map_err(|e| CliError::usage(format!("invalid name '{}': {e}", a.name)))?;
    let qtype: QType = a.qtype.parse().map_err(|_| CliError::usage(format!("unknown query type '{}'", a.qtype)))?;
    let opts = QueryOptions {
        recursion_desired: !a.no_rd,
        checking_disabled: false,
        edns: (!a.no_edns).then_some(Edns { udp_size: a.edns_size, dnssec_ok: a.dnssec, version: 0 }),
    };
    let mut wire = Vec::new();
    QueryTemplate::new(&name, qtype, opts).write(a.id.unwrap_or_else(random_id), &mut wire);

    let lane = a.tls.apply(LaneOptions { query_timeout: a.timeout, ..LaneOptions::default() }, &target)?;
    if a.tls.insecure && target.scheme.is_encrypted() {
        let w = b";; WARNING: --insecure: the server's certificate was not verified\n";
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), w);
    }
    let ask = |target: &Target, scheme: Scheme| {
        exchange_with(target, scheme, &wire, a.timeout, &lane).map_err(|e| match e {
            OneShotError::Unreachable(m) => CliError::usage(m),
            OneShotError::NoAnswer(m) | OneShotError::NotDns(m) => CliError::failure(m),
        })
    };
    let mut scheme = target.scheme;
    // Each address of a name in turn, as dig does, until one can be reached.
    let mut target = target;
    let mut unreachable = Vec::new();
    let mut first = None;
    for addr in target.addrs.clone() {
        let at = target.at(addr);
        match ask(&at, scheme) {
            Err(e) if e.code == 2 && addr != *target.addrs.last().unwrap_or(&addr) => unreachable.push(e.message),
            r => {
                target = at;
                first = Some(r);
                break;
            }
        }
    }
    let (mut msg, mut took) = match first {
        Some(r) => r?,
        None => ask(&target, scheme)?,
    };
    for m in &unreachable {
        eprintln!("volley: {m}; trying the next address of {}", target.host);
    }
    // After the first answer, so that an unusable target is still one line.
    for w in a.tls.unused(&[&target]) {
        eprintln!("volley: warning: {w}");
    }
    let truncated = Header::parse(&msg).is_ok_and(|h| h.truncated());
    if truncated && scheme == Scheme::Udp && !a.ignore_tc {
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), b";; Truncated, retrying over TCP\n");
        scheme = Scheme::Tcp;
        (msg, took) = ask(&target, scheme)?;
    }
    // As dig does, say when what came back does not look like the response to this query (it
    // is still printed: the point of a one-shot query is to see what the server sent).
    let mut text = String::new();
    if Header::parse(&msg).is_ok_and(|h| !h.is_response()) {
        text += ";; WARNING: the QR bit is not set: this is not a response\n";
    }
    if let (Ok(asked), Ok(got)) = (volley_wire::question_key(&wire), volley_wire::question_key(&msg)) {
        if asked != got {
            text += ";; WARNING: question section mismatch: the response is for another question\n";
        }
    }
    text += &match volley_wire::display::format_message(&msg) {
        Ok(text) => text,
        Err(e) => format!(";; malformed response ({e}), {} bytes: {}\n", msg.len(), hex(&msg)),
    };
    text += &format!(";; Query time: {:.3} ms\n", took.as_secs_f64() * 1e3);
    text += &format!(";; SERVER: {}#{}({scheme})\n", target.addr.ip(), target.addr.port());
    text += &format!(";; MSG SIZE  rcvd: {}\n", msg.len());
    // A closed pipe (`| head`) is not an error.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A message ID no other run of this program can predict (std's per-process random hash keys).
fn random_id() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new().build_hasher().finish() as u16
}
