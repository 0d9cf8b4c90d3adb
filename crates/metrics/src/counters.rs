use std::collections::BTreeMap;

use volley_wire::Rcode;

/// Declares a closed set of named kinds with a stable text name each.
macro_rules! kinds {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum $name { $($(#[$vm])* $v,)* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v,)*];
            pub const COUNT: usize = Self::ALL.len();
            /// The name used in summaries and results files.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $s,)* }
            }
            pub fn from_name(s: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|k| k.as_str() == s)
            }
            /// Counts indexed by kind → name → count, zero entries left out.
            pub fn map(counts: &[u64; Self::COUNT]) -> std::collections::BTreeMap<String, u64> {
                Self::ALL.iter().filter(|k| counts[**k as usize] > 0).map(|k| (k.to_string(), counts[*k as usize])).collect()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str(self.as_str()) }
        }
    };
}

kinds! {
    /// Why a query failed (a fate, like answered or timed out). Transports map their errors here.
    ErrorKind {
        /// The target refused: TCP RST to the SYN, or ICMP port unreachable.
        Refused = "refused",
        /// The connection was reset (RST) while the query was outstanding.
        Reset = "reset",
        /// The peer closed the connection (FIN) while the query was outstanding.
        Closed = "closed",
        /// Connecting failed for another reason (unreachable, timed out, address in use).
        Connect = "connect",
        /// The response to this query could not be parsed past its header, or was not a
        /// response (QR bit clear) on a stream that carries only this query's answer (DoH, DoQ).
        Malformed = "malformed",
        /// A response carried this query's ID but another question.
        Mismatch = "mismatch",
        /// The generator had no capacity to send it (all IDs or streams in use).
        Overload = "overload",
        /// The generator ran out of something of its own machine: open files (EMFILE, ENFILE:
        /// raise `ulimit -n` or open fewer connections) or source ports towards the server
        /// (EADDRNOTAVAIL on connect: spread them with `--bind`).
        LocalLimit = "local_limit",
        /// Any other I/O error on send or receive.
        Io = "io",
        /// The TLS handshake failed (certificate not verified, no common version or cipher),
        /// or a TLS record could not be read.
        Tls = "tls",
        /// The server agreed on no ALPN protocol we offered, or on another one.
        Alpn = "alpn",
        /// The DoH server answered with an HTTP status other than 200.
        HttpStatus = "http_status",
        /// The DoH response was not `application/dns-message`.
        ContentType = "content_type",
        /// The HTTP/2 or HTTP/3 server sent GOAWAY before answering this query.
        Goaway = "goaway",
        /// The HTTP/2 server reset this query's stream (RST_STREAM).
        StreamReset = "stream_reset",
        /// The HTTP/2 server refused this query's stream unprocessed (RST_STREAM
        /// REFUSED_STREAM, RFC 9113 section 8.7): it is sent again once, and fails with this
        /// kind when refused again.
        RefusedStream = "refused_stream",
        /// The QUIC server reset this query's stream (RESET_STREAM or STOP_SENDING).
        QuicStreamReset = "quic_stream_reset",
        /// The QUIC connection was closed or lost (CONNECTION_CLOSE).
        QuicClosed = "quic_closed",
        /// The QUIC server answered with a stateless reset: it no longer knows the connection
        /// (it restarted, or lost its state).
        StatelessReset = "stateless_reset",
        /// The QUIC idle timeout expired.
        IdleTimeout = "idle_timeout",
    }
}

kinds! {
    /// Why a query never left the generator before its timeout (the fate `unsent`): it
    /// waited for the transport the whole time, and the server never saw it.
    Unsent {
        /// No connection of its lane was up: being opened, backing off after failures, or
        /// waiting for a `--conn-rate` slot.
        NoConnection = "no_connection",
        /// It waited for the server to allow another stream: handed to a QUIC connection (DoQ,
        /// DoH/3) for MAX_STREAMS, or on an HTTP/2 connection whose streams were all in use
        /// (SETTINGS_MAX_CONCURRENT_STREAMS).
        NoStreamCredit = "no_stream_credit",
        /// A connection was up but did not take it: HTTP/1.1 busy with an earlier request, or
        /// behind other queries in its lane.
        Queued = "queued",
    }
}

kinds! {
    /// Responses that matched no query in flight: counted, never taken as answers.
    Unexpected {
        /// Its query had already timed out.
        Late = "late",
        /// No query in flight had its ID (or it was already answered).
        UnknownId = "unknown_id",
        /// Not even a DNS header could be read, a frame was too short, or the message was not
        /// a response (QR bit clear: a reflected query).
        Malformed = "malformed",
    }
}

kinds! {
    /// Why a query handed to a lane waited before it left: the transport was not ready to
    /// carry it (the server's or the protocol's doing, not the generator's). It counts in the
    /// query's latency, and apart from the generator's own lateness.
    Wait {
        /// The lane's first connection was being opened: the run's set-up (a closed loop's
        /// first queries wait for it).
        Setup = "setup",
        /// A later connection was being opened (TCP, TLS or QUIC handshake) for the lane: after
        /// the server closed or refused the last one, or the client's policy ended it.
        Connecting = "connecting",
        /// The lane's next connection waited for its slot under `--conn-rate`.
        ConnRate = "conn_rate",
        /// The lane waited out a backoff after a failed or refused connection.
        Backoff = "backoff",
        /// The server's stream limit was reached (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS, QUIC
        /// MAX_STREAMS): the query waited for a stream to end.
        StreamCredit = "stream_credit",
        /// HTTP/1.1: the connection was busy with earlier requests (one at a time, or
        /// `--h1-pipeline` deep).
        Http1Slot = "http1_slot",
        /// The lane's connection had spent its budget (`--conn-queries`, `--conn-lifetime`) and
        /// the next one was not opening yet (the spent one drains in the background; this is
        /// the moment between the two).
        Rotation = "rotation",
    }
}

/// Event counts of one worker, one second, or a whole run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// Queries issued by the load model (each gets exactly one fate).
    pub issued: u64,
    /// Queries that left the generator (counted once, when they first left).
    pub sent: u64,
    pub answered: u64,
    pub timed_out: u64,
    pub failed: u64,
    /// Queries whose timeout came before they could leave (a fate).
    pub unsent: u64,
    /// `unsent` by why.
    pub unsent_reasons: [u64; Unsent::COUNT],
    /// Answered queries per header RCODE (0..=15).
    pub rcodes: [u64; 16],
    pub errors: [u64; ErrorKind::COUNT],
    pub unexpected: [u64; Unexpected::COUNT],
    /// Answers with TC=1 (also counted in `answered`).
    pub truncated: u64,
    /// DNS message bytes written and read (payload, without transport framing).
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// What crossed the wire, headers included (IP, UDP/TCP), as the transports counted it.
    pub wire: WireStats,
    /// Connection events (connection-based transports).
    pub conns: crate::ConnCounters,
    /// Queries sent again after a connection's end left them unanswered: `again[k]` counts
    /// those sent again at least k + 1 times (the last place: that many or more).
    pub again: [u64; AGAIN_MAX],
}

/// How many resends of one query [`Counters::again`] tells apart (more are counted with the last).
pub const AGAIN_MAX: usize = 16;

impl Counters {
    pub fn merge(&mut self, o: &Counters) {
        self.issued += o.issued;
        self.sent += o.sent;
        self.answered += o.answered;
        self.timed_out += o.timed_out;
        self.failed += o.failed;
        self.unsent += o.unsent;
        add(&mut self.unsent_reasons, &o.unsent_reasons);
        add(&mut self.rcodes, &o.rcodes);
        add(&mut self.errors, &o.errors);
        add(&mut self.unexpected, &o.unexpected);
        self.truncated += o.truncated;
        self.bytes_out += o.bytes_out;
        self.bytes_in += o.bytes_in;
        self.wire.add(&o.wire);
        self.conns.merge(&o.conns);
        add(&mut self.again, &o.again);
    }

    /// Queries by how many times they went out in all, for those sent more than once:
    /// `"2"` (sent again once), `"3"`, ... and the last `"17+"`; empty when none was.
    pub fn tries_map(&self) -> std::collections::BTreeMap<String, u64> {
        (0..AGAIN_MAX)
            .map(|k| {
                let exactly = self.again[k].saturating_sub(self.again.get(k + 1).copied().unwrap_or(0));
                let name = if k + 1 == AGAIN_MAX { format!("{}+", k + 2) } else { (k + 2).to_string() };
                (name, if k + 1 == AGAIN_MAX { self.again[k] } else { exactly })
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Fates so far; with `in_flight` it equals `issued` at the end of a run.
    pub fn ended(&self) -> u64 {
        self.answered + self.timed_out + self.failed + self.unsent
    }

    /// Why queries were unsent, by name, zero entries left out.
    pub fn unsent_map(&self) -> BTreeMap<String, u64> {
        Unsent::map(&self.unsent_reasons)
    }

    /// RCODE name → count, zero entries left out.
    pub fn rcode_map(&self) -> BTreeMap<String, u64> {
        self.rcodes
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| (Rcode(i as u16).name().into_owned(), *n))
            .collect()
    }

    pub fn error_map(&self) -> BTreeMap<String, u64> {
        ErrorKind::map(&self.errors)
    }

    pub fn unexpected_map(&self) -> BTreeMap<String, u64> {
        Unexpected::map(&self.unexpected)
    }

    /// Inverse of the maps above, for files read back (merge, compare).
    pub fn set_from_maps(
        &mut self,
        rcodes: &BTreeMap<String, u64>,
        errors: &BTreeMap<String, u64>,
        unexpected: &BTreeMap<String, u64>,
    ) {
        for (name, n) in rcodes {
            if let Some(i) = (0..16u16).find(|i| Rcode(*i).name() == name.as_str()) {
                self.rcodes[i as usize] = *n;
            }
        }
        for (name, n) in errors {
            if let Some(k) = ErrorKind::from_name(name) {
                self.errors[k as usize] = *n;
            }
        }
        for (name, n) in unexpected {
            if let Some(k) = Unexpected::from_name(name) {
                self.unexpected[k as usize] = *n;
            }
        }
    }
}

/// Bytes and packets on the wire in both directions, IP and transport headers included:
/// from TCP_INFO for TCP-based transports, QUIC's path statistics, datagram counts for UDP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WireStats {
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub packets_in: u64,
    /// Segments the generator's TCP stack sent again (TCP_INFO `tcpi_total_retrans`), and
    /// packets QUIC declared lost (their data sent again); counted in `packets_out` too.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retransmits: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl WireStats {
    pub fn add(&mut self, o: &WireStats) {
        self.bytes_out += o.bytes_out;
        self.bytes_in += o.bytes_in;
        self.packets_out += o.packets_out;
        self.packets_in += o.packets_in;
        self.retransmits += o.retransmits;
    }

    pub fn is_empty(&self) -> bool {
        *self == WireStats::default()
    }
}

/// Adds counts element-wise.
pub(crate) fn add<const N: usize>(a: &mut [u64; N], b: &[u64; N]) {
    for (a, b) in a.iter_mut().zip(b.iter()) {
        *a += b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_round_trip() {
        let mut c = Counters { answered: 5, ..Default::default() };
        c.rcodes[0] = 3;
        c.rcodes[3] = 2;
        c.errors[ErrorKind::Reset as usize] = 7;
        c.unexpected[Unexpected::Late as usize] = 1;
        let mut d = Counters { answered: 5, ..Default::default() };
        d.set_from_maps(&c.rcode_map(), &c.error_map(), &c.unexpected_map());
        assert_eq!(c, d);
        assert_eq!(c.rcode_map().get("NXDOMAIN"), Some(&2));
        assert_eq!(c.error_map().len(), 1);
    }
}
