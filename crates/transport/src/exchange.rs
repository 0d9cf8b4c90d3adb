use volley_metrics::{Close, Departure, DrainEnd, ErrorKind, Handshake, Unexpected, Wait};

/// A query in flight, as the engine names it: never 0 (0 marks an empty slot in tables).
pub type Token = u64;

/// What a transport may tell the load engine, and ask of it. Single-threaded: a worker's
/// engine and its lanes share one thread, so calls are plain, cheap method calls.
pub trait Exchange {
    /// Monotonic clock of the run, nanoseconds.
    fn now(&self) -> u64;
    /// Writes query `token` with DNS `id` into `out` (cleared first). False when the query
    /// has already ended (timed out before it could be sent): skip it.
    fn encode(&self, token: Token, id: u16, out: &mut Vec<u8>) -> bool;
    /// The query left, `bytes` long (the DNS message, without framing).
    fn sent(&self, token: Token, bytes: usize, now: u64);
    /// The kernel's time (on the clock of [`Exchange::now`]) when query `token`'s latest
    /// transmission left the socket (a transmit stamp from the error queue, see
    /// `stamp.rs`), never later than now (the caller clamps the clocks' conversion error).
    /// Called after [`Exchange::sent`], at most once per transmission, and not at all where
    /// the kernel gives none: the engine then takes the time of `sent`. `by`: the query's own
    /// stamp ([`Departure::Kernel`]), or a time between two ([`Departure::Between`]).
    fn stamped(&self, token: Token, at: u64, by: Departure) {
        let _ = (token, at, by);
    }
    /// Query `token`, taken from its lane, waited `ns` for its transport before it could
    /// leave, for `why` (a QUIC stream: the server's MAX_STREAMS). Called before
    /// [`Exchange::sent`]; waits in the lane itself are read from [`crate::Lane::waited`].
    fn waited(&self, token: Token, why: Wait, ns: u64) {
        let _ = (token, why, ns);
    }
    /// A response for `token` arrived; the engine checks its question and records the fate.
    fn response(&self, token: Token, msg: &[u8], now: u64);
    /// The query failed.
    fn failed(&self, token: Token, kind: ErrorKind, now: u64);
    /// The connection that carried `token` ended (`kind`: the server closed, reset or refused
    /// it) before its answer came. True: send it again on the lane's next connection (the
    /// caller puts it back with [`crate::Lane::requeue`]), as RFC 7766 asks of clients
    /// ("SHOULD retry unanswered queries if the connection closes before receiving all
    /// outstanding responses"; it sets no count: the query's own deadline bounds it, and
    /// `--resend` may). False: it has failed with `kind` (it was resent as often as allowed),
    /// or it has ended. By default it fails.
    fn resend(&self, token: Token, kind: ErrorKind, now: u64) -> bool {
        self.failed(token, kind, now);
        false
    }
    /// A response matched nothing in flight.
    fn unexpected(&self, kind: Unexpected, bytes: usize, now: u64);
    /// Whether `token` still waits for a fate.
    fn is_live(&self, token: Token) -> bool;
    /// When the engine gives `token` up if no answer came (on the clock of [`Exchange::now`]):
    /// a transport that makes the query wait (for a stream, say) waits no longer. None when
    /// it has ended, or the engine does not tell.
    fn deadline(&self, token: Token) -> Option<u64> {
        let _ = token;
        None
    }
    /// A connection came up.
    fn conn_opened(&self, h: &Handshake, now: u64);
    /// A connection attempt failed.
    fn conn_failed(&self, kind: ErrorKind, now: u64);
    /// A connection attempt failed, with the reason in words (e.g. `invalid peer
    /// certificate: UnknownIssuer`). By default the reason is dropped.
    fn conn_failed_why(&self, kind: ErrorKind, why: &str, now: u64) {
        let _ = why;
        self.conn_failed(kind, now);
    }
    /// A connection ended.
    fn conn_closed(&self, how: Close, now: u64);
    /// A connection stopped taking queries with some still outstanding: it drains them while
    /// the lane goes on on its next connection. Its close is reported when the drain ends.
    fn conn_draining(&self, now: u64) {
        let _ = now;
    }
    /// A draining connection's drain ended (before its close is reported).
    fn drain_ended(&self, how: DrainEnd, now: u64) {
        let _ = (how, now);
    }
    /// Bytes and packets on the wire, headers included: a connection's totals when it closes
    /// (TCP_INFO, QUIC statistics), or a batch of datagrams (UDP).
    fn wire(&self, w: &volley_metrics::WireStats);
    /// A transport-level event that is not a query's fate (e.g. ICMP unreachable on UDP), or
    /// a detail of one (the HTTP status of an `http_status` failure).
    fn event(&self, what: &str);
    /// Adds `n` to event `what` at once (a count gathered over a batch).
    fn events(&self, what: &str, n: u64) {
        for _ in 0..n {
            self.event(what);
        }
    }
}

/// Hands one received message to the engine: finds its query by ID in `ids`, or counts it
/// as unexpected. Shared by every transport that matches by DNS ID (UDP, TCP, DoT).
#[inline]
pub fn deliver<X: Exchange + ?Sized>(msg: &[u8], ids: &mut crate::IdTable, x: &X, now: u64) {
    // A message without the QR bit is not a response (a reflected query, say): it answers
    // nothing, and the query it names stays in flight for its real answer.
    if msg.len() < volley_wire::HEADER_LEN || msg[2] & 0x80 == 0 {
        x.unexpected(Unexpected::Malformed, msg.len(), now);
        return;
    }
    let id = u16::from_be_bytes([msg[0], msg[1]]);
    match ids.remove(id) {
        Some(t) if x.is_live(t) => x.response(t, msg, now),
        Some(_) => x.unexpected(Unexpected::Late, msg.len(), now),
        None => x.unexpected(Unexpected::UnknownId, msg.len(), now),
    }
}

/// The error kind of an I/O error on a socket.
pub fn error_kind(e: &std::io::Error) -> ErrorKind {
    use std::io::ErrorKind as K;
    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
        return ErrorKind::LocalLimit;
    }
    match e.kind() {
        K::ConnectionRefused => ErrorKind::Refused,
        K::ConnectionReset => ErrorKind::Reset,
        K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof | K::NotConnected => ErrorKind::Closed,
        K::AddrInUse | K::AddrNotAvailable | K::TimedOut | K::HostUnreachable | K::NetworkUnreachable => {
            ErrorKind::Connect
        }
        _ => ErrorKind::Io,
    }
}
