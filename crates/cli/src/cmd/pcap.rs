//! `volley pcap`: a capture (pcap or pcapng) in, a clients file (`volley.clients/1`) out, for
//! replaying each captured client with its own timing. `--dump` prints a clients file as text.

use std::fs::File;
use std::io::{self, BufReader, Write};
use std::net::IpAddr;
use std::path::PathBuf;

use clap::Args;
use volley_replay::clients::AtomicFile;
use volley_replay::{ClientsFile, Extractor, Options};

use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  volley pcap resolver.pcap -o resolver.clients
  volley pcap uplink.pcapng -o clients.clients --resolver 192.0.2.53 --resolver 2001:db8::53
  volley pcap resolver.pcap -o c.clients --exclude-src 192.0.2.53 --anonymize
  volley pcap --dump resolver.clients | head

What is read: pcap (microsecond or nanosecond) and pcapng; link types Ethernet (VLAN tags too),
Linux cooked v1/v2, raw IP, BSD and OpenBSD loopback; IPv4 and IPv6; DNS over UDP and over TCP
(streams reassembled, messages split across segments or several per segment). Each source
address that sent a query becomes one client. Malformed packets are counted and skipped; a
capture cut short is read up to where it breaks, with a warning, and the clients file is still
written. The clients file format is described in docs/pcap.md.

Exit status: 0 done (also for a truncated capture); 1 the clients file could not be written;
2 bad input (unreadable file, not a capture, not a clients file).";

#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct PcapArgs {
    /// The capture to read (pcap or pcapng).
    #[arg(value_name = "INPUT", required_unless_present = "dump", conflicts_with = "dump")]
    pub input: Option<PathBuf>,

    /// The clients file to write (written atomically: a temporary file renamed into place).
    #[arg(short = 'o', long, value_name = "FILE", required_unless_present = "dump", conflicts_with = "dump")]
    pub output: Option<PathBuf>,

    /// Drop queries sent from this address (repeatable), e.g. the resolver's own queries to
    /// authoritative servers when the capture was taken on the resolver.
    #[arg(long, value_name = "ADDR")]
    pub exclude_src: Vec<IpAddr>,

    /// Keep only queries sent to this address (repeatable): the resolver that was captured.
    #[arg(long, value_name = "ADDR")]
    pub resolver: Vec<IpAddr>,

    /// DNS server port (repeatable): packets to it are queries, from it responses.
    #[arg(long, value_name = "PORT", default_values_t = [53u16])]
    pub port: Vec<u16>,

    /// Withhold the clients' source addresses from the file (only their IP version is kept).
    #[arg(long)]
    pub anonymize: bool,

    /// Print a clients file as text (one line per query) instead of reading a capture.
    #[arg(long, value_name = "FILE.clients")]
    pub dump: Option<PathBuf>,
}

pub fn run(a: PcapArgs) -> CliResult {
    if let Some(path) = &a.dump {
        return dump(path);
    }
    let (Some(input), Some(output)) = (&a.input, &a.output) else {
        return Err(CliError::usage("volley pcap needs INPUT and -o OUTPUT (or --dump FILE)"));
    };
    let shown_in = input.display().to_string();
    let file = File::open(input).map_err(|e| CliError::usage(format!("{shown_in}: {e}")))?;
    let opts = Options {
        ports: a.port.clone(),
        exclude_src: a.exclude_src.clone(),
        resolvers: a.resolver.clone(),
        anonymize: a.anonymize,
        ..Options::default()
    };
    let mut ex = Extractor::new(opts);
    ex.read_capture(BufReader::with_capacity(1 << 20, file))
        .map_err(|e| CliError::usage(format!("{shown_in}: {e}")))?;
    if let Some(t) = &ex.report().truncated {
        eprintln!("volley: warning: {shown_in}: {t}; the packets before were read and their clients written");
    }
    let shown_out = output.display().to_string();
    let write_err = |e: io::Error| CliError::failure(format!("{shown_out}: {e}"));
    let file = AtomicFile::with_capacity(output, 1 << 20).map_err(write_err)?;
    let (report, file) = ex.write(file).map_err(write_err)?;
    file.commit().map_err(write_err)?;
    print!("{}", report.render(&shown_in, &shown_out));
    Ok(())
}

fn dump(path: &PathBuf) -> CliResult {
    let mut reader = ClientsFile::open(path).map_err(CliError::usage)?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    match volley_replay::dump(&mut reader, &mut out) {
        Ok(()) => {}
        Err(volley_replay::clients::DumpError::Read(e)) => return Err(CliError::usage(e)),
        // A closed pipe (`| head`) is not an error.
        Err(volley_replay::clients::DumpError::Write(e)) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        Err(volley_replay::clients::DumpError::Write(e)) => return Err(CliError::failure(format!("stdout: {e}"))),
    }
    match out.flush() {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(CliError::failure(format!("stdout: {e}"))),
        _ => Ok(()),
    }
}
