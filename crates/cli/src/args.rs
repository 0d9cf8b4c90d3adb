//! Flags and flag value parsers shared by subcommands.

/// Durations as people write them: `500ms`, `1s`, `1.5s`, `2m`, `1h`, `250us`; a bare number
/// is seconds. One parser for every flag and for the responder's rules and labels.
pub use volley_responder::parse_duration;

use std::path::PathBuf;

use clap::Args;
use volley_transport::{DohMethod, HttpVersion, LaneOptions, Scheme, Target, TlsSettings, TlsVersion};

use crate::error::{CliError, CliResult};

/// TLS and HTTP flags, defined once for every command that reaches a server.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "TLS and HTTP")]
pub struct TlsArgs {
    /// DoH: HTTP version: 1.1 (one request in flight per connection, or --h1-pipeline;
    /// connections default to the concurrency over that), 2 (multiplexed, up to the server's
    /// stream limit) or 3 (QUIC) [default: 2].
    #[arg(long = "http", value_name = "VERSION")]
    pub http: Option<String>,

    /// DoH: HTTP method: post (message as the body) or get (base64url in ?dns=). Both send
    /// message ID 0 and application/dns-message [default: post].
    #[arg(long = "doh-method", value_name = "METHOD")]
    pub doh_method: Option<String>,

    /// DoH over HTTP/1.1: requests in flight per connection, pipelined (written back to back,
    /// answered in order; RFC 9112 section 9.3). 1: one at a time (keep-alive only).
    #[arg(long = "h1-pipeline", value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub h1_pipeline: u32,

    /// Server name to send (SNI) and verify the certificate against [default: the target's
    /// host when it is a name; for an IP address no SNI is sent and the certificate must
    /// hold that address].
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,

    /// Trust the PEM certificates in FILE instead of the system roots (/etc/ssl/certs).
    #[arg(long = "ca", value_name = "FILE")]
    pub ca: Option<PathBuf>,

    /// Do not verify the server's certificate (INSECURE; the results say so).
    #[arg(long)]
    pub insecure: bool,

    /// Offer only this TLS version: 1.2 or 1.3 [default: both, 1.3 preferred; QUIC is
    /// always 1.3].
    #[arg(long = "tls-version", value_name = "VERSION")]
    pub tls_version: Option<String>,

    /// TLS session resumption on reconnects: on or off.
    #[arg(long = "tls-resume", value_name = "on|off", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub tls_resume: bool,

    /// Send queries as 0-RTT early data when a resumed session allows it (TLS 1.3 for DoT,
    /// QUIC 0-RTT for DoQ and DoH/3). Needs --tls-resume on.
    #[arg(long = "zero-rtt")]
    pub zero_rtt: bool,

    /// DoQ and DoH/3: keep the address validation tokens a server sends (QUIC NEW_TOKEN) and
    /// present one on the next connection to it, as browsers and stubs do; the server then
    /// need not wait out its anti-amplification limit or send a Retry. on or off (a client
    /// that keeps none). Independent of --tls-resume: a token validates an address, it does
    /// not resume a session.
    #[arg(long = "quic-tokens", value_name = "on|off", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub quic_tokens: bool,

    /// DoQ and DoH/3: write a qlog trace of each QUIC connection into DIR (created if missing;
    /// one JSON-SEQ file each, `client-PID-N.sqlog`, for qvis). Other transports: no effect.
    #[arg(long = "qlog", value_name = "DIR")]
    pub qlog: Option<PathBuf>,
}

impl TlsArgs {
    /// `base` with the TLS and HTTP settings of the flags, checked for `target`.
    pub fn apply(&self, base: LaneOptions, target: &Target) -> CliResult<LaneOptions> {
        let http = match self.http.as_deref().unwrap_or("2") {
            "1.1" | "1" => HttpVersion::Http1,
            "2" => HttpVersion::Http2,
            "3" => HttpVersion::Http3,
            v => return Err(CliError::usage(format!("invalid --http '{v}': expected 1.1, 2 or 3"))),
        };
        let method = self.doh_method.as_deref().unwrap_or("post");
        let doh_method = match method.to_ascii_lowercase().as_str() {
            "get" => DohMethod::Get,
            "post" => DohMethod::Post,
            _ => return Err(CliError::usage(format!("invalid --doh-method '{method}': expected get or post"))),
        };
        let version = match self.tls_version.as_deref() {
            None => None,
            Some("1.2") => Some(TlsVersion::Tls12),
            Some("1.3") => Some(TlsVersion::Tls13),
            Some(v) => return Err(CliError::usage(format!("invalid --tls-version '{v}': expected 1.2 or 1.3"))),
        };
        let resume = self.tls_resume;
        if self.zero_rtt && !resume {
            return Err(CliError::usage("--zero-rtt needs --tls-resume on (0-RTT data rides on a resumed session)"));
        }
        if self.zero_rtt && version == Some(TlsVersion::Tls12) {
            return Err(CliError::usage(
                "--zero-rtt needs TLS 1.3 (TLS 1.2 has no early data): drop --tls-version 1.2",
            ));
        }
        if self.insecure && self.ca.is_some() {
            return Err(CliError::usage(
                "--insecure skips certificate verification, so --ca would not be used: give one of them",
            ));
        }
        if self.sni.as_deref() == Some("") {
            return Err(CliError::usage("invalid --sni '': expected a server name"));
        }
        let tls = TlsSettings {
            sni: self.sni.clone(),
            ca_file: self.ca.clone(),
            insecure: self.insecure,
            version,
            resume,
            zero_rtt: self.zero_rtt,
        };
        if let Some(dir) = &self.qlog {
            volley_transport::qlog::prepare_dir(dir).map_err(CliError::usage)?;
        }
        let opts = LaneOptions {
            tls,
            http,
            doh_method,
            h1_pipeline: self.h1_pipeline,
            qlog: self.qlog.clone(),
            quic_tokens: self.quic_tokens,
            ..base
        };
        if self.h1_pipeline > 1 && !(target.scheme.is_https() && opts.http_for(target.scheme) == HttpVersion::Http1) {
            return Err(CliError::usage("--h1-pipeline applies to DoH over HTTP/1.1 (https:// with --http 1.1)"));
        }
        if target.scheme.is_encrypted() {
            let quic = target.scheme == Scheme::Quic || opts.http_for(target.scheme) == HttpVersion::Http3;
            volley_transport::tls::check(&opts.tls, quic).map_err(CliError::usage)?;
            volley_transport::tls::server_name(&opts.tls, target).map_err(CliError::usage)?;
        }
        Ok(opts)
    }

    /// The flags given that none of `targets` uses (TLS flags without an encrypted target,
    /// HTTP flags without a DoH one, `--http` with only `h3://` targets), each said in a line.
    pub fn unused(&self, targets: &[&Target]) -> Vec<String> {
        let mut out = Vec::new();
        let encrypted = targets.iter().any(|t| t.scheme.is_encrypted());
        let doh: Vec<&&Target> = targets.iter().filter(|t| t.scheme.is_https() || t.scheme == Scheme::H3).collect();
        if !encrypted {
            let given = [
                ("--ca", self.ca.is_some()),
                ("--sni", self.sni.is_some()),
                ("--insecure", self.insecure),
                ("--tls-version", self.tls_version.is_some()),
                ("--zero-rtt", self.zero_rtt),
            ];
            let names: Vec<&str> = given.iter().filter(|(_, on)| *on).map(|(n, _)| *n).collect();
            if !names.is_empty() {
                out.push(format!(
                    "{} has no effect: no target uses TLS (tls://, https://, h3://, quic://)",
                    names.join(", ")
                ));
            }
        }
        if doh.is_empty() {
            let names: Vec<&str> = [("--http", self.http.is_some()), ("--doh-method", self.doh_method.is_some())]
                .iter()
                .filter(|(_, on)| *on)
                .map(|(n, _)| *n)
                .collect();
            if !names.is_empty() {
                out.push(format!("{} has no effect: no target is DoH (https://, h3://)", names.join(", ")));
            }
        } else if let Some(v) = self.http.as_deref().filter(|v| *v != "3") {
            if doh.iter().all(|t| t.scheme == Scheme::H3) {
                out.push(format!("--http {v} has no effect: h3:// is always HTTP/3"));
            }
        }
        out
    }
}

/// A switch flag's value: `on` or `off`.
/// A rate a user may lift: `N` (1 or more) or `off` (no limit: None).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateOrOff(pub Option<u32>);

impl std::fmt::Display for RateOrOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(n) => write!(f, "{n}"),
            None => f.write_str("off"),
        }
    }
}

pub fn parse_rate_or_off(s: &str) -> Result<RateOrOff, String> {
    if s == "off" {
        return Ok(RateOrOff(None));
    }
    match s.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(RateOrOff(Some(n))),
        _ => Err("expected a number of 1 or more, or off".to_string()),
    }
}

pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err("expected on or off".to_string()),
    }
}
