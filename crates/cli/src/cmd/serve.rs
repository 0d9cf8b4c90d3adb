//! `volley serve`: the responder, a deterministic DNS server to measure transports against.

use std::io::Write;
use std::net::IpAddr;
use std::time::Duration;

use clap::Args;
use volley_responder::{
    parse_duration, AnswerConfig, CertSource, DelayRule, Fault, KeyType, Ratio, ResponderConfig, TlsConfig,
};

use crate::args::parse_on_off;
use crate::error::{CliError, CliResult};

const EXAMPLES: &str = "\
What it answers (any name, deterministic):
  A 192.0.2.1, AAAA 2001:db8::1, TXT \"volley\" (ANY: the TXT), other types NODATA; TTL --ttl.
  Special labels anywhere in the name, any case, combinable:
    nx          NXDOMAIN              fail        SERVFAIL
    drop        never answered        size-N      TXT answer with exactly N octets of RDATA (0..65000)
    delay-DUR   answered DUR late (200ms, 1s, 1500us)
  UDP answers that do not fit 512 octets (or the query's EDNS buffer size) come back with TC=1.

Zones (--zone FILE, repeatable): the names of an RFC 1035 zone file are answered as its
  authoritative server does: its records, NXDOMAIN/NODATA with the SOA, CNAME chains, wildcards,
  referrals with glue at delegations. Other names keep the synthesised answers (--zones-only:
  REFUSED). A bad zone file stops the start: FILE:LINE and what is wrong, exit 2.

Encrypted transports (off unless given a port; 0 picks a free one):
  --dot-port (DoT), --doh-port (DoH over HTTP/1.1 and HTTP/2, by ALPN), --doh3-port (DoH over
  HTTP/3, UDP), --doq-port (DoQ, UDP). The certificate is generated at start (a CA and a leaf
  for localhost, 127.0.0.1, ::1 and the listen address; --key-type) unless --cert/--key give
  one; --ca-out writes the CA for clients to trust.

Faults (--fault, repeatable; for provoking client errors):
  http-status=CODE[:N/M]    DoH answers CODE (e.g. 503) instead of the DNS answer
  content-type=TYPE[:N/M]   DoH answers with this content type (e.g. text/plain)
  goaway-after=N            HTTP/2 and HTTP/3 GOAWAY after N requests on a connection
                            (HTTP/1.1: connection: close)
  rst-stream=N/M            DoH: reset N of every M request streams (HTTP/1.1: close)
  refuse-stream=N/M         HTTP/2: refuse N of every M streams unread (REFUSED_STREAM)
  tcp-reset-after=N         TCP, DoT: answer N queries per connection, RST at the next
  quic-stream-reset=N/M     DoQ: reset N of every M streams (DOQ_INTERNAL_ERROR)
  N/M counts the requests of the whole server: the last N of each block of M.

Server policies (what public resolvers do to their connections):
  --max-queries-per-conn N  close each connection gracefully after N answers (Cloudflare: 10000)
  --idle-timeout DUR        close connections idle for DUR (Quad9: about 20s)
  --max-conns N             hold at most N connections per listener; at the cap a new
                            connection takes the place of the longest idle one (idle 200 ms
                            or more, nothing in flight: evicted_idle), else it is closed or
                            refused (refused_max_conns)
  --in-order                TCP, DoT: answer a connection's queries in the order they came
  --max-streams N           concurrent streams per HTTP/2 or QUIC connection

Limits against abuse (counted in the stats line):
  --request-timeout DUR     a query begun must arrive whole within DUR (default 5s): ends
                            slowloris and stalled length prefixes (closed_slow)
  --max-handshakes N        TLS/QUIC handshakes in progress per listener (default 1024):
                            TCP waits in the accept queue, QUIC is refused (refused_handshakes)
  --max-pending-bytes N     TCP, DoT: unsent answer bytes per connection before it stops
                            reading (default 262144)
  --udp-recv-buffer BYTES   UDP, DoQ, DoH/3 socket receive buffer (default 4 MiB: queues a
                            generator's bursts; 212992, the kernel's default, loses some
                            queries under a flood instead)
  --max-qps-per-client N    queries per second per client address, every transport: over
                            it dropped (UDP, TCP, DoT), 429 (DoH), stream reset (DoQ)
                            (rate_limited)
  --udp-error-rate N|off    UDP: FORMERR and NOTIMP answers per second per thread (default
                            100, as unbound); the rest withheld (errors_withheld)

Output:
  One line per listener on stdout, then nothing until SIGINT/SIGTERM, then one stats line
  on stderr:
    listening udp 127.0.0.1:5353
    listening tcp 127.0.0.1:5353
    listening dot 127.0.0.1:8853
    stats queries=.. answered=.. dropped=.. delayed=.. truncated=.. formerr=.. tcp_connections=..
          dot_connections=.. doh_connections=.. doh3_connections=.. doq_connections=..
          tls_resumed=.. early_data=.. retry_sent=.. quic_token_validated=..
          closed_max_queries=.. closed_idle=.. refused_max_conns=.. evicted_idle=.. cancelled=.. stopped=.. closed_slow=.. refused_handshakes=..
          rate_limited=.. errors_withheld=..

Examples:
  Serve on 127.0.0.1:5353, UDP and TCP, one thread per core:
    volley serve
  Any free ports (read them from the 'listening' lines):
    volley serve -p 0
  Every 25th query answered 1 s late, 1 in 100 dropped, 2 threads:
    volley serve --delay 1s:1/25 --drop 1/100 -T 2
  A resolver that closes like Cloudflare and Quad9 together:
    volley serve --dot-port 8853 --max-queries-per-conn 10000 --idle-timeout 20s
  Every transport, CA written for clients:
    volley serve --dot-port 8853 --doh-port 8443 --doh3-port 8443 --doq-port 8853 --ca-out ca.pem
  Authoritative for a zone, REFUSED for other names:
    volley serve --zone example.test.zone --zones-only
  Try it with kdig:
    kdig @127.0.0.1 -p 5353 www.example.test A
    kdig @127.0.0.1 -p 5353 size-3000.x.test TXT +bufsize=1232     (TC=1)
    kdig @127.0.0.1 -p 5353 size-3000.x.test TXT +tcp              (full answer)
    kdig @127.0.0.1 -p 5353 delay-200ms.nx.test A                  (NXDOMAIN, 200 ms late)
    kdig @127.0.0.1 -p 8853 +tls +tls-ca=ca.pem +tls-hostname=localhost www.example.test
    kdig @127.0.0.1 -p 8443 +https +tls-ca=ca.pem +tls-hostname=localhost www.example.test
  DoQ with q (Debian's kdig 3.2.6 has no QUIC: its +quic falls back to TCP):
    SSL_CERT_FILE=ca.pem q www.example.test A @quic://localhost:8853";

/// Answer DNS over UDP, TCP, DoT, DoH (HTTP/1.1, 2, 3) and DoQ from one deterministic answer engine.
#[derive(Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct ServeArgs {
    /// Address to listen on (IPv4 or IPv6, e.g. 127.0.0.1, ::1, 0.0.0.0).
    #[arg(short = 'l', long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub listen: String,

    /// Port for UDP and TCP; 0 picks a free port for each.
    #[arg(short = 'p', long, value_name = "PORT", default_value_t = 5353)]
    pub port: u16,

    /// UDP port, overriding --port (0: any free port).
    #[arg(long, value_name = "PORT")]
    pub udp_port: Option<u16>,

    /// TCP port, overriding --port (0: any free port).
    #[arg(long, value_name = "PORT")]
    pub tcp_port: Option<u16>,

    /// Do not serve UDP.
    #[arg(long)]
    pub no_udp: bool,

    /// Do not serve TCP.
    #[arg(long)]
    pub no_tcp: bool,

    /// I/O threads per transport, each with its own SO_REUSEPORT socket [default: one per core].
    #[arg(short = 'T', long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,

    /// TTL of the synthesised records, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub ttl: u32,

    /// Answer N of every M queries DUR late: the last N of each block of M queries
    /// (1s:1/25 delays queries 25, 50, 75, ...). Repeatable; the longest matching delay wins.
    #[arg(long, value_name = "DUR:N/M")]
    pub delay: Vec<String>,

    /// Never answer N of every M queries (the last N of each block of M).
    #[arg(long, value_name = "N/M")]
    pub drop: Option<String>,

    /// UDP: send the same-size answers of a batch to one address as one segmented train
    /// (UDP_SEGMENT: one pass through the kernel's send path) [on], or one message per answer
    /// [off]; QUIC (DoQ, DoH/3) likewise for its packets. A packet capture on this host sees a
    /// train as one large packet (as with offloads on a real interface); use off when a
    /// capture must show each packet.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub udp_gso: bool,

    /// DoQ and DoH/3: write a qlog trace of each QUIC connection into DIR (created if missing;
    /// one JSON-SEQ file each, `server-PID-N.sqlog`, for qvis).
    #[arg(long = "qlog", value_name = "DIR")]
    pub qlog: Option<std::path::PathBuf>,

    /// Answer at most N queries per second (in 100 ms windows of N/10); drop the rest, as an
    /// overloaded server would: a target with a known capacity, e.g. for `volley limit`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_qps: Option<u64>,

    /// Close a connection (TCP, DoT, DoH/1.1 and /2, DoH/3, DoQ) after this long without a
    /// query (e.g. 10s, 500ms; Quad9 closes after about 20 s). TCP and DoT: FIN; HTTP/2:
    /// GOAWAY; HTTP/1.1: FIN; QUIC: the transport's idle timeout.
    #[arg(long, value_name = "DUR", default_value = "10s")]
    pub idle_timeout: String,

    /// Close each connection gracefully after answering N queries on it (Cloudflare: 10000).
    /// TCP and DoT: FIN after the N-th answer; HTTP/2 and HTTP/3: GOAWAY, then close once its
    /// streams are done (HTTP/3: once the responses are acknowledged, CONNECTION_CLOSE
    /// H3_NO_ERROR unless the client closed first); HTTP/1.1: `connection: close` on the N-th
    /// response; DoQ: CONNECTION_CLOSE (DOQ_NO_ERROR) once every answer is acknowledged.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_queries_per_conn: Option<u64>,

    /// TCP and DoT: answer the queries of a connection in the order they came, an answer that
    /// is ready waiting behind a delayed one (a server that works through a connection's
    /// queries one at a time; RFC 7766 allows either). Without it each answer leaves as soon
    /// as it is ready.
    #[arg(long)]
    pub in_order: bool,

    /// Hold at most N connections per listener (TCP, DoT, DoH, DoH/3, DoQ; over all threads).
    /// At the cap a new TCP, DoT or DoH connection takes the place of the accepting thread's
    /// longest-idle one (idle 200 ms or more, nothing in flight), as unbound cuts its idle
    /// timeout when its TCP buffers run out; when none is that idle, the new
    /// connection is closed right after accept; QUIC ones are refused (CONNECTION_REFUSED).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_conns: Option<u64>,

    /// A query or request begun must arrive whole within DUR, or the connection is closed
    /// (counted closed_slow): TCP and DoT, a message whose length prefix came; DoH, a POST
    /// body (408); TLS and QUIC, the handshake (bounded by --idle-timeout too). Bytes
    /// dribbled in do not extend it: this ends slowloris and stalled length prefixes.
    #[arg(long, value_name = "DUR", default_value = "5s")]
    pub request_timeout: String,

    /// Most TLS (DoT, DoH) or QUIC (DoQ, DoH/3) handshakes in progress per listener, over all
    /// threads; meanwhile new TCP connections wait in the kernel's accept queue, QUIC ones
    /// are refused (counted refused_handshakes).
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_handshakes: u64,

    /// TCP and DoT: most answer bytes a connection may hold unsent (not yet taken by the
    /// client, plus delayed answers); beyond it the server reads nothing more from it until
    /// the client reads. At least 65537.
    #[arg(long, value_name = "BYTES", default_value_t = 262_144, value_parser = clap::value_parser!(u64).range(65_537..=1 << 30))]
    pub max_pending_bytes: u64,

    /// Receive buffer of each UDP, DoQ and DoH/3 socket (SO_RCVBUF, capped by the kernel's
    /// net.core.rmem_max). The default, 4 MiB, queues a load generator's bursts rather than
    /// losing them; under a flood a good query waits behind that queue. 212992 (the kernel's
    /// default, which unbound and dnsdist keep) loses some queries under a flood instead.
    #[arg(long, value_name = "BYTES", default_value_t = volley_responder::UDP_RECV_BUFFER as u64,
        value_parser = clap::value_parser!(u64).range(volley_responder::MIN_UDP_RECV_BUFFER as u64..=volley_responder::MAX_UDP_RECV_BUFFER as u64))]
    pub udp_recv_buffer: u64,

    /// Answer at most N queries per second from each client IP address, on every transport
    /// (a token bucket N deep per address); the rest get no DNS answer (counted
    /// rate_limited): dropped over UDP, TCP and DoT, 429 over DoH, a stream reset over DoQ.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_qps_per_client: Option<u64>,

    /// UDP: send at most N error answers (FORMERR, NOTIMP: to messages that are no query the
    /// server can read) a second from each UDP thread, as unbound's workers send 100; the rest
    /// are withheld (counted errors_withheld), so that a flood of junk from forged sources
    /// costs a read, not a send, and reflects nothing. off: answer every one.
    #[arg(long, value_name = "N|off", default_value_t = crate::args::RateOrOff(Some(volley_responder::UDP_ERROR_RATE)),
        value_parser = crate::args::parse_rate_or_off)]
    pub udp_error_rate: crate::args::RateOrOff,

    /// UDP payload size advertised in the OPT record of responses to EDNS queries.
    #[arg(long, value_name = "N", default_value_t = 1232, value_parser = clap::value_parser!(u16).range(512..))]
    pub edns_size: u16,

    /// Serve DoT (DNS over TLS, RFC 7858) on this TCP port (0: any free port).
    #[arg(long, value_name = "PORT")]
    pub dot_port: Option<u16>,

    /// Serve DoH (RFC 8484) over HTTP/1.1 and HTTP/2 (chosen by ALPN) on this TCP port.
    #[arg(long, value_name = "PORT")]
    pub doh_port: Option<u16>,

    /// Serve DoH over HTTP/3 on this UDP port.
    #[arg(long, value_name = "PORT")]
    pub doh3_port: Option<u16>,

    /// Serve DoQ (DNS over QUIC, RFC 9250) on this UDP port.
    #[arg(long, value_name = "PORT")]
    pub doq_port: Option<u16>,

    /// The DoH path; other paths get 404.
    #[arg(long, value_name = "PATH", default_value = "/dns-query")]
    pub doh_path: String,

    /// Certificate chain (PEM, leaf first) for the encrypted transports; needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<std::path::PathBuf>,

    /// Private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<std::path::PathBuf>,

    /// Key type of the certificate generated at start (and of its CA): rsa2048, rsa3072,
    /// p256, ed25519.
    #[arg(long, value_name = "TYPE", default_value = "p256", conflicts_with = "cert")]
    pub key_type: String,

    /// Generate a certificate chain of at least N bytes (DER): an intermediate CA and a leaf
    /// padded with extra names, e.g. to make the first QUIC flight exceed three times the
    /// client's Initial (anti-amplification, seeds/002) [default: the leaf alone, about 500].
    #[arg(long, value_name = "N", conflicts_with = "cert")]
    pub cert_chain_bytes: Option<usize>,

    /// Write the generated CA certificate (PEM) to FILE, for clients to trust.
    #[arg(long, value_name = "FILE", conflicts_with = "cert")]
    pub ca_out: Option<std::path::PathBuf>,

    /// No session resumption: no TLS tickets, no session cache; every handshake is full.
    #[arg(long)]
    pub no_tickets: bool,

    /// Accept TLS 1.3 early data and QUIC 0-RTT from resuming clients.
    #[arg(long, conflicts_with = "no_tickets")]
    pub zero_rtt: bool,

    /// QUIC (DoQ, DoH/3): validate client addresses with a Retry before any handshake.
    #[arg(long)]
    pub retry: bool,

    /// QUIC (DoQ, DoH/3): address validation tokens sent in NEW_TOKEN frames on each
    /// connection (RFC 9000 section 8.1.3). A client's later connection from the same address
    /// that presents one is validated at once: no anti-amplification wait, no Retry. 0: none
    /// sent, none accepted.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=16))]
    pub quic_tokens: u32,

    /// QUIC: send the --quic-tokens but accept none, so that a client presenting one is still
    /// held to the anti-amplification limit (what seeds/002 found DoQ resolvers do).
    #[arg(long)]
    pub quic_tokens_ignored: bool,

    /// Most concurrent streams per HTTP/2 or QUIC connection.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams: u32,

    /// Answer the names of this zone file (an RFC 1035 master file) as its authoritative
    /// server: its records, NXDOMAIN and NODATA with its SOA, CNAME chains, wildcards,
    /// referrals at its delegations. Repeatable. Names outside every zone keep the
    /// synthesised answers (or are refused: --zones-only).
    #[arg(long, value_name = "FILE")]
    pub zone: Vec<std::path::PathBuf>,

    /// Answer REFUSED for names outside every --zone instead of synthesising an answer.
    #[arg(long, requires = "zone")]
    pub zones_only: bool,

    /// Misbehave on purpose (repeatable): http-status=CODE[:N/M], content-type=TYPE[:N/M],
    /// goaway-after=N, rst-stream=N/M, refuse-stream=N/M, tcp-reset-after=N,
    /// quic-stream-reset=N/M.
    #[arg(long, value_name = "NAME=VALUE")]
    pub fault: Vec<String>,
}

/// Turns the flags into the library's configuration; bad values give a one-line usage error.
fn config(args: &ServeArgs) -> CliResult<ResponderConfig> {
    let listen: IpAddr = args.listen.trim_start_matches('[').trim_end_matches(']').parse().map_err(|_| {
        CliError::usage(format!("invalid --listen '{}': expected an IP address such as 127.0.0.1 or ::1", args.listen))
    })?;
    let mut delays = Vec::with_capacity(args.delay.len());
    for d in &args.delay {
        let rule: DelayRule = d.parse().map_err(|e: String| CliError::usage(format!("invalid --delay {e}")))?;
        delays.push(rule);
    }
    let drop = match &args.drop {
        None => None,
        Some(s) => Some(s.parse::<Ratio>().map_err(|e| CliError::usage(format!("invalid --drop {e}")))?),
    };
    let idle_timeout: Duration = parse_duration(&args.idle_timeout).map_err(|_| {
        CliError::usage(format!(
            "invalid --idle-timeout '{}': expected a duration such as 10s or 500ms",
            args.idle_timeout
        ))
    })?;
    if idle_timeout.is_zero() {
        return Err(CliError::usage("invalid --idle-timeout '0': must be greater than zero"));
    }
    let request_timeout: Duration = parse_duration(&args.request_timeout).map_err(|_| {
        CliError::usage(format!(
            "invalid --request-timeout '{}': expected a duration such as 5s or 500ms",
            args.request_timeout
        ))
    })?;
    if request_timeout.is_zero() {
        return Err(CliError::usage("invalid --request-timeout '0': must be greater than zero"));
    }
    let encrypted = [args.dot_port, args.doh_port, args.doh3_port, args.doq_port].iter().any(Option::is_some);
    if args.no_udp && args.no_tcp && !encrypted {
        return Err(CliError::usage("--no-udp and --no-tcp together leave nothing to serve"));
    }
    let cert = match (&args.cert, &args.key) {
        (Some(cert), Some(key)) => CertSource::Files { cert: cert.clone(), key: key.clone() },
        _ => {
            let key =
                args.key_type.parse::<KeyType>().map_err(|e| CliError::usage(format!("invalid --key-type {e}")))?;
            match args.cert_chain_bytes {
                Some(n) if n > volley_responder::MAX_CHAIN_BYTES => {
                    return Err(CliError::usage(format!(
                        "invalid --cert-chain-bytes {n}: at most {}",
                        volley_responder::MAX_CHAIN_BYTES
                    )))
                }
                Some(bytes) => CertSource::GenerateChain { key, bytes },
                None => CertSource::Generate(key),
            }
        }
    };
    let mut faults = Vec::with_capacity(args.fault.len());
    for f in &args.fault {
        faults.push(f.parse::<Fault>().map_err(|e| CliError::usage(format!("invalid --fault {e}")))?);
    }
    Ok(ResponderConfig {
        listen,
        udp_port: (!args.no_udp).then(|| args.udp_port.unwrap_or(args.port)),
        tcp_port: (!args.no_tcp).then(|| args.tcp_port.unwrap_or(args.port)),
        dot_port: args.dot_port,
        doh_port: args.doh_port,
        doh3_port: args.doh3_port,
        doq_port: args.doq_port,
        threads: args.threads.map_or(0, usize::from),
        idle_timeout,
        max_streams: args.max_streams,
        max_queries_per_conn: args.max_queries_per_conn,
        in_order: args.in_order,
        max_conns: args.max_conns,
        request_timeout,
        max_handshakes: Some(args.max_handshakes),
        max_pending_bytes: args.max_pending_bytes as usize,
        udp_recv_buffer: args.udp_recv_buffer as usize,
        max_qps_per_client: args.max_qps_per_client,
        udp_error_rate: args.udp_error_rate.0,
        doh_path: args.doh_path.clone(),
        tls: TlsConfig { cert, ca_out: args.ca_out.clone(), tickets: !args.no_tickets, zero_rtt: args.zero_rtt },
        retry: args.retry,
        quic_tokens: args.quic_tokens,
        quic_tokens_ignored: args.quic_tokens_ignored,
        udp_gso: args.udp_gso,
        qlog: match &args.qlog {
            Some(dir) => {
                volley_transport::qlog::prepare_dir(dir).map_err(CliError::usage)?;
                Some(dir.clone())
            }
            None => None,
        },
        faults,
        answer: AnswerConfig {
            ttl: args.ttl,
            edns_size: args.edns_size,
            delays,
            drop,
            max_qps: args.max_qps,
            zones: load_zones(&args.zone)?,
            zones_only: args.zones_only,
        },
    })
}

/// Loads the `--zone` files (none: None); says on stderr what each holds and how long the
/// loading took. A zone file that cannot be served is a usage error naming FILE:LINE.
fn load_zones(files: &[std::path::PathBuf]) -> CliResult<Option<std::sync::Arc<volley_responder::Zones>>> {
    if files.is_empty() {
        return Ok(None);
    }
    let started = std::time::Instant::now();
    let zones = volley_responder::load_zones(files).map_err(|e| match e {
        volley_responder::ZoneError::Read { .. } => CliError::usage(format!("--zone: {e}")),
        e => CliError::usage(e),
    })?;
    let took = started.elapsed();
    for (zone, file) in zones.zones().iter().zip(files) {
        eprintln!(
            "zone {} from {}: {} records, {} names",
            zone.apex_text(),
            file.display(),
            zone.records(),
            zone.names()
        );
    }
    eprintln!("zones loaded in {:.3} s", took.as_secs_f64());
    Ok(Some(std::sync::Arc::new(zones)))
}

pub fn run(args: ServeArgs) -> CliResult {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let config = config(&args)?;
    // Signals first, so a SIGTERM sent right after the 'listening' lines is not lost.
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| CliError::failure(format!("cannot install signal handlers: {e}")))?;
    let responder = volley_responder::start(config).map_err(|e| match e {
        volley_responder::ResponderError::Io(e) => CliError::failure(e),
        e => CliError::usage(e),
    })?;
    {
        let mut out = std::io::stdout().lock();
        for (transport, addr) in responder.addresses() {
            let _ = writeln!(out, "listening {transport} {addr}");
        }
        let _ = out.flush();
    }
    let _ = signals.forever().next();
    let stats = responder.stats();
    responder.stop();
    eprintln!("{stats}");
    Ok(())
}
