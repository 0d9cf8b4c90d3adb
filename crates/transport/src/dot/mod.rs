//! DNS over TLS (RFC 7858): the TCP framing and pipelining of `stream`, inside TLS. ALPN
//! `dot` is offered; a server that agrees on none is accepted (many do not send ALPN).
//! With 0-RTT on and a ticket that allows it, the queries waiting when the connection
//! starts go out as TLS 1.3 early data.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use volley_metrics::{EarlyData, ErrorKind, Handshake};

use crate::meter::TcpMeter;
use crate::stamp::StampedTcp;
use crate::stream::{self, Buffers, Framing, Served};
use crate::tls;
use crate::{tcp, Exchange, IdTable, Lane, LaneOptions, Target};

/// ALPN protocol of DoT (RFC 7858 registered `dot`).
pub const ALPN: &[u8] = b"dot";

/// The driver of one DoT lane. Every connection (attempts that failed included) reports its
/// bytes and packets on the wire from `TCP_INFO` when it ends.
pub async fn drive<X: Exchange + 'static>(target: Target, lane: Rc<Lane>, x: Rc<X>, opts: LaneOptions) {
    let (cfg, name) = match setup(&opts, &target, &[ALPN]) {
        Ok(v) => v,
        Err(why) => {
            x.conn_failed_why(ErrorKind::Tls, &why, x.now());
            return stream::fail_forever(&lane, &*x, ErrorKind::Tls).await;
        }
    };
    let mut backoff = stream::BACKOFF;
    let mut ids = IdTable::default();
    let mut bufs = Buffers::new();
    loop {
        if !stream::may_connect(&lane, &opts).await {
            return;
        }
        let mut meter = None;
        let connecting = connect(&target, &cfg, &name, &opts, &lane, &*x, &mut ids, &mut bufs, None, &mut meter);
        let Some(r) = stream::attempt(&lane, connecting).await else { return };
        let mut tls = match r {
            Ok(s) => s,
            Err((kind, why)) => {
                if let Some(m) = meter {
                    m.finish(&lane, &x);
                }
                x.conn_failed_why(kind, &why, x.now());
                // Queries sent as early data on the failed attempt fail with it.
                let now = x.now();
                for t in ids.drain() {
                    x.failed(t, kind, now);
                }
                bufs.clear();
                if stream::after_failure(&lane, &*x, kind, &mut backoff).await {
                    return;
                }
                continue;
            }
        };
        backoff = stream::BACKOFF;
        if let Some(m) = meter.as_mut() {
            m.release();
        }
        let rx = tls.get_ref().0.stamp();
        let served = {
            let (rd, wr) = tokio::io::split(&mut tls);
            stream::serve(rd, wr, &lane, &*x, &mut ids, &mut bufs, tls::io_error_kind, &rx, opts.query_timeout).await
        };
        match served {
            Served::Turn(how) if ids.any_live(&*x) => {
                // Queries are still outstanding: the connection drains them in the background
                // while the lane goes on on a new one.
                let (mut ids, rbuf) = (std::mem::take(&mut ids), bufs.take_read());
                let (l, x2, timeout) = (lane.clone(), x.clone(), opts.query_timeout);
                tokio::task::spawn_local(async move {
                    let (lane, x) = (l, x2);
                    stream::drain(&mut tls, &lane, &*x, &mut ids, rbuf, tls::io_error_kind, &rx, timeout).await;
                    close(tls, meter, &lane, &x).await;
                });
                if stream::after_turn(&lane, how).await {
                    return;
                }
            }
            Served::Turn(how) => {
                // Nothing outstanding.
                bufs.clear();
                x.conn_closed(how, x.now());
                close(tls, meter, &lane, &x).await;
                if stream::after_turn(&lane, how).await {
                    return;
                }
            }
            Served::Failed(kind) => {
                bufs.clear();
                let closing = stream::end_connection(&lane, &*x, &mut ids, kind);
                if closing {
                    // close_notify, without waiting for the peer.
                    let _ = tokio::time::timeout(Duration::from_millis(10), tls.shutdown()).await;
                }
                if let Some(m) = meter {
                    m.finish_with(tls.into_inner().0.into_inner(), &lane, &x);
                }
                if closing || stream::after_server_close(&lane, &mut backoff).await {
                    return;
                }
            }
        }
    }
}

/// Ends a connection the client is done with: close_notify, then FIN (the meter sends it and
/// reads the wire counts).
async fn close<X: Exchange + 'static>(
    mut tls: TlsStream<StampedTcp>,
    meter: Option<TcpMeter>,
    lane: &Rc<Lane>,
    x: &Rc<X>,
) {
    let _ = tokio::time::timeout(Duration::from_millis(100), tls.shutdown()).await;
    if let Some(m) = meter {
        m.finish_with(tls.into_inner().0.into_inner(), lane, x);
    }
}

/// The lane's client config (see [`tls::lane_config`]) and the server name of a target.
pub(crate) fn setup(
    opts: &LaneOptions,
    target: &Target,
    alpn: &[&[u8]],
) -> Result<(Arc<rustls::ClientConfig>, ServerName<'static>), String> {
    let cfg = tls::lane_config(opts, alpn, false).map_err(|e| e.to_string())?;
    let name = tls::server_name(&opts.tls, target).map_err(|e| e.to_string())?;
    Ok((cfg, name))
}

/// Opens TCP then TLS and reports the connection (`conn_opened`). With early data allowed,
/// the lane's waiting queries are framed (IDs from `ids`) and sent as 0-RTT data.
/// `want_alpn`: the ALPN protocol the server must agree on (None: any or none). `meter` gets
/// the connection's [`TcpMeter`] as soon as its socket exists, whatever happens next: the
/// caller finishes it when the connection (or the attempt) ends.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn connect<X: Exchange + ?Sized>(
    target: &Target,
    cfg: &Arc<rustls::ClientConfig>,
    name: &ServerName<'static>,
    opts: &LaneOptions,
    lane: &Lane,
    x: &X,
    ids: &mut IdTable,
    bufs: &mut Buffers,
    want_alpn: Option<&[u8]>,
    meter: &mut Option<TcpMeter>,
) -> Result<TlsStream<StampedTcp>, (ErrorKind, String)> {
    let tcp::Connected { s: tcp, tcp_ns, done: tcp_done, left } = tcp::connect_timed(target, opts, x, meter).await?;
    let early = cfg.enable_early_data && want_alpn.is_none();
    let connector = TlsConnector::from(cfg.clone()).early_data(early);
    let handshake = async {
        let mut s = connector.connect(name.clone(), StampedTcp::new(tcp, opts.tx_stamps.is_some())).await?;
        let mut offered = false;
        if s.get_ref().1.is_handshaking() {
            // Early data state: what is written now goes as 0-RTT data; flush completes
            // the handshake (and sends it again if the server refused it).
            if bufs.frame_queued(lane, x, ids) > 0 {
                offered = true;
                s.write_all(bufs.pending()).await?;
                bufs.clear();
            }
            s.flush().await?;
        }
        Ok::<_, std::io::Error>((s, offered))
    };
    let (s, offered) = match tokio::time::timeout(left, handshake).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return Err(handshake_failed(target, &e)),
        Err(_) => return Err((ErrorKind::Tls, format!("TLS handshake with {} timed out", target))),
    };
    report(x, target, &s, tcp_ns, x.now() - tcp_done, offered, want_alpn)?;
    Ok(s)
}

/// The error kind and text of a failed TLS handshake.
pub(crate) fn handshake_failed(target: &Target, e: &std::io::Error) -> (ErrorKind, String) {
    let kind = match tls::io_error_kind(e) {
        k @ (ErrorKind::Tls | ErrorKind::Alpn) => k,
        // The server closed or reset during the handshake: a TLS failure too.
        _ => ErrorKind::Tls,
    };
    (kind, format!("TLS handshake with {} failed: {}", target, tls::describe(e)))
}

/// Reports a connection whose TLS handshake is done (`conn_opened`): `offered` whether early
/// data was sent. Fails when the server did not agree on `want_alpn` (None: any or none).
pub(crate) fn report<X: Exchange + ?Sized>(
    x: &X,
    target: &Target,
    s: &TlsStream<StampedTcp>,
    tcp_ns: u64,
    tls_ns: u64,
    offered: bool,
    want_alpn: Option<&[u8]>,
) -> Result<(), (ErrorKind, String)> {
    let (io, conn) = s.get_ref();
    let n = tls::negotiated(conn);
    if let Some(want) = want_alpn {
        if conn.alpn_protocol() != Some(want) {
            return Err((
                ErrorKind::Alpn,
                format!(
                    "ALPN with {}: offered {}, server agreed on {}",
                    target,
                    String::from_utf8_lossy(want),
                    n.alpn.as_deref().unwrap_or("none")
                ),
            ));
        }
    }
    let early_data = match (offered, conn.is_early_data_accepted()) {
        (false, _) => EarlyData::NotOffered,
        (true, true) => EarlyData::Accepted,
        (true, false) => EarlyData::Rejected,
    };
    let h = Handshake {
        tcp_ns: Some(tcp_ns),
        tls_ns: Some(tls_ns),
        rtt_ns: tcp::rtt_ns(io.get_ref()),
        resumed: n.resumed,
        early_data,
        tls_version: n.version,
        alpn: n.alpn,
        cipher: n.cipher,
        ..Handshake::default()
    };
    x.conn_opened(&h, x.now());
    Ok(())
}
