//! Hints for the spellings of the tools volley sits beside (dnsperf, resperf, dnspyre,
//! flamethrower): when a command line does not parse, or a queries file is not there, and the
//! user typed what another tool means by a flag, the error says volley's spelling. Flags that
//! mean the same in volley need no hint: -s/-p/-m (the server, port and transport, as
//! dnsperf's), -Q (rate), -l (duration), -d (dnsperf's queries file), -t (timeout), -T
//! (threads), -c (dnspyre's concurrency; dnsperf's -c counts its sockets, see below).
//! resperf's -m is its highest rate, where volley's -m is the transport: a number there names
//! `volley limit --max`.

use std::path::Path;

use volley_wire::QType;

use crate::args::parse_duration;

/// A hint for a command line that clap refused, from the flags and values in `args`.
pub fn hint(args: &[String]) -> Option<String> {
    let is_number = |v: Option<&String>| v.is_some_and(|v| v.parse::<u64>().is_ok());
    let is_qtype = |v: Option<&String>| v.is_some_and(|v| v.parse::<QType>().is_ok() && v.parse::<u64>().is_err());
    let has_rate = args.iter().any(|a| {
        a == "-Q"
            || a == "--rate"
            || a.starts_with("--rate=")
            || a.strip_prefix("-Q").is_some_and(|q| q.parse::<f64>().is_ok())
    });
    for (i, a) in args.iter().enumerate() {
        let next = args.get(i + 1);
        let h = match a.as_str() {
            // dnsperf: -c N client sockets, typed with -Q; volley: -c is the closed loop's
            // queries in flight, which a rate (-Q, the open loop) excludes.
            "-c" if is_number(next) && has_rate => {
                "dnsperf's -c is its client sockets: volley's are --connections N; volley's -c is the queries in flight of the closed loop, which -Q replaces"
            }
            // dnsperf: -q N queries outstanding; volley: -q is --quiet, -c is the queries in flight.
            "-q" if is_number(next) => "volley's -q is --quiet: the queries in flight (dnsperf's -q) are -c N",
            // dnspyre and flamethrower (-T): the query type.
            "-t" if is_qtype(next) => "volley's -t is the timeout: the query type (dnspyre's -t) is --qtype TYPE",
            "-T" if is_qtype(next) => "volley's -T is the worker threads: the query type (flamethrower's -T) is --qtype TYPE",
            "--type" => "the query type (dnspyre's --type) is --qtype TYPE",
            // flamethrower.
            "-P" => "the transport (flamethrower's -P) is the TARGET's scheme (udp://, tcp://, tls://, https://, quic://) or -m MODE",
            "-f" => "a queries file (flamethrower's -f) is -d FILE",
            "-r" => "the query name (flamethrower's -r) is --name NAME",
            // dnspyre.
            "--rate-limit" => "a rate (dnspyre's --rate-limit) is -Q/--rate QPS",
            "--number" => "a number of queries (dnspyre's --number, per worker) is -n/--count N, in all",
            // dnsperf.
            "-S" => "statistics every N seconds (dnsperf's -S) are the live progress line (--progress always) and --metrics-file FILE",
            "-D" => "the DO bit (dnsperf's -D) is --dnssec",
            "-e" => "volley sends EDNS(0) by default (dnsperf's -e); --no-edns leaves it out",
            _ => continue,
        };
        return Some(h.to_string());
    }
    None
}

/// A hint for a -m/--mode that is a number: resperf's -m is the highest rate it tries.
pub fn numeric_mode(mode: &str) -> Option<String> {
    mode.parse::<f64>()
        .is_ok_and(|q| q.is_finite() && q > 0.0)
        .then(|| format!("resperf's -m is the highest rate: volley limit --max {mode} searches up to it"))
}

/// A hint for a queries file that is not there: dnspyre's -d is a duration.
pub fn missing_queries_file(path: &Path) -> Option<String> {
    let s = path.to_str()?;
    (!path.exists() && parse_duration(s).is_ok())
        .then(|| format!("-d is the queries file (dnsperf's -d): for a duration of {s} (dnspyre's -d) use -l {s}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(line: &str) -> Option<String> {
        hint(&line.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn other_tools_spellings_get_volleys() {
        assert!(h("volley run -s 127.0.0.1 -q 100").unwrap().contains("-c N"));
        assert!(h("volley run udp://x -t AAAA").unwrap().contains("--qtype"));
        assert!(h("volley run udp://x -T AAAA").unwrap().contains("--qtype"));
        assert!(h("volley run udp://x -P tcp").unwrap().contains("-m MODE"));
        assert!(h("volley run udp://x -f q.txt").unwrap().contains("-d FILE"));
        assert!(h("volley run udp://x --type A").unwrap().contains("--qtype"));
        assert!(h("volley run -s 127.0.0.1 -c 10 -Q 1000").unwrap().contains("--connections N"));
        assert!(h("volley run -s 127.0.0.1 -Q 1000 -c 10").unwrap().contains("--connections N"));
        assert!(numeric_mode("100000").unwrap().contains("volley limit --max 100000"));
        assert_eq!(numeric_mode("udp"), None);
        // volley's own meanings get none.
        assert_eq!(h("volley run udp://x -c 10 -l 1s"), None);
        assert_eq!(h("volley run udp://x -q -t 2s -T 4"), None);
        assert!(missing_queries_file(Path::new("10s")).unwrap().contains("-l 10s"));
        assert_eq!(missing_queries_file(Path::new("queries.txt")), None);
    }
}
