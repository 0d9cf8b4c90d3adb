//! h3's QUIC interface on quinn for the client, as h3-quinn has it, but with request streams
//! that a client gives up cancels as RFC 9114 section 4.1.1 asks: a request stream dropped
//! before its response was read (the query timed out) is stopped (STOP_SENDING), and reset
//! (RESET_STREAM) where the request was not finished, both with H3_REQUEST_CANCELLED.
//! h3-quinn's streams would stop it with code 0 (quinn's drop), and its receiving half cannot
//! be stopped while a read is pending. The control and QPACK streams stay h3-quinn's.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use h3::error::Code;
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};
use quinn::{ConnectionError, ReadError, VarInt, WriteError};

use crate::qlog::{StreamState, Trace};

/// H3_REQUEST_CANCELLED (RFC 9114 section 8.1): the client no longer wants the response.
pub(crate) const H3_REQUEST_CANCELLED: u64 = 0x10c;

type Opening = Pin<Box<dyn Future<Output = Result<(quinn::SendStream, quinn::RecvStream), ConnectionError>>>>;

/// One QUIC connection under h3, on the client's side.
pub(crate) struct Conn {
    inner: h3_quinn::Connection,
    opener: Opener,
    /// Waits for a server-initiated request stream (an error h3 reports) or the connection's
    /// end (which h3 learns from it too, as from h3-quinn's).
    accepting: Option<Opening>,
}

impl Conn {
    pub(crate) fn new(quic: quinn::Connection) -> Conn {
        let inner = h3_quinn::Connection::new(quic.clone());
        let opener = Opener { quic, inner: quic::Connection::<Bytes>::opener(&inner), opening: None };
        Conn { inner, opener, accepting: None }
    }
}

impl quic::Connection<Bytes> for Conn {
    type RecvStream = h3_quinn::RecvStream;
    type OpenStreams = Opener;

    fn poll_accept_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::RecvStream, ConnectionErrorIncoming>> {
        quic::Connection::<Bytes>::poll_accept_recv(&mut self.inner, cx)
    }

    fn poll_accept_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::BidiStream, ConnectionErrorIncoming>> {
        let accepting = self.accepting.get_or_insert_with(|| {
            let c = self.opener.quic.clone();
            Box::pin(async move { c.accept_bi().await })
        });
        let r = ready!(accepting.as_mut().poll(cx));
        self.accepting = None;
        let (send, recv) = r.map_err(connection_error)?;
        Poll::Ready(
            bidi(send, recv, None)
                .map_err(|_| ConnectionErrorIncoming::Undefined(Arc::new(ConnectionError::LocallyClosed))),
        )
    }

    fn opener(&self) -> Self::OpenStreams {
        self.opener.clone()
    }
}

impl quic::OpenStreams<Bytes> for Conn {
    type BidiStream = Bidi;
    type SendStream = h3_quinn::SendStream<Bytes>;

    fn poll_open_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        self.opener.poll_open_bidi(cx)
    }

    fn poll_open_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<Bytes>::poll_open_send(&mut self.inner, cx)
    }

    fn close(&mut self, code: Code, reason: &[u8]) {
        quic::OpenStreams::<Bytes>::close(&mut self.inner, code, reason)
    }
}

/// Opens the client's streams: request streams of its own, the others h3-quinn's.
pub(crate) struct Opener {
    quic: quinn::Connection,
    inner: h3_quinn::OpenStreams,
    opening: Option<Opening>,
}

impl Clone for Opener {
    fn clone(&self) -> Opener {
        Opener { quic: self.quic.clone(), inner: self.inner.clone(), opening: None }
    }
}

impl quic::OpenStreams<Bytes> for Opener {
    type BidiStream = Bidi;
    type SendStream = h3_quinn::SendStream<Bytes>;

    fn poll_open_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        let opening = self.opening.get_or_insert_with(|| {
            let c = self.quic.clone();
            Box::pin(async move { c.open_bi().await })
        });
        let r = ready!(opening.as_mut().poll(cx));
        self.opening = None;
        let (send, recv) =
            r.map_err(|e| StreamErrorIncoming::ConnectionErrorIncoming { connection_error: connection_error(e) })?;
        Poll::Ready(bidi(send, recv, crate::qlog::of(&self.quic)))
    }

    fn poll_open_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<Bytes>::poll_open_send(&mut self.inner, cx)
    }

    fn close(&mut self, code: Code, reason: &[u8]) {
        quic::OpenStreams::<Bytes>::close(&mut self.inner, code, reason)
    }
}

/// A request stream of quinn's streams; its events go to `trace` (`--qlog`).
fn bidi(send: quinn::SendStream, recv: quinn::RecvStream, trace: Option<Trace>) -> Result<Bidi, StreamErrorIncoming> {
    let quic_id = u64::from(send.id());
    let id = StreamId::try_from(quic_id).map_err(|e| StreamErrorIncoming::Unknown(format!("stream ID: {e}").into()))?;
    if let Some(t) = &trace {
        t.stream_state(quic_id, None, StreamState::Open);
    }
    let traced = trace.map(|trace| Traced { trace, id: quic_id, offset: 0 });
    let send = Send { stream: send, writing: None, id, finished: false, traced: traced.clone() };
    Ok(Bidi { send, recv: Recv { stream: recv, id, done: false, traced } })
}

/// A traced stream's half: where its events go, and the bytes sent so far.
#[derive(Clone)]
struct Traced {
    trace: Trace,
    id: u64,
    offset: u64,
}

/// A request stream.
pub(crate) type Bidi = super::Bidi<Send, Recv>;

/// The receiving half of a request stream: stopped with H3_REQUEST_CANCELLED when dropped
/// before the response was read to its end.
pub(crate) struct Recv {
    stream: quinn::RecvStream,
    id: StreamId,
    /// Read to its end, or ended by an error: nothing to stop.
    done: bool,
    traced: Option<Traced>,
}

impl quic::RecvStream for Recv {
    type Buf = Bytes;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        // quinn's read is cancel-safe: a read polled once and dropped loses nothing.
        let r = ready!(pin!(self.stream.read_chunk(usize::MAX, true)).poll(cx));
        self.done = !matches!(r, Ok(Some(_)));
        if let Some(t) = &self.traced {
            match &r {
                Ok(Some(c)) => t.trace.data_moved(t.id, c.offset, c.bytes.len() as u64, false),
                Ok(None) => t.trace.stream_state(t.id, None, StreamState::Closed),
                Err(_) => {}
            }
        }
        Poll::Ready(r.map(|c| c.map(|c| c.bytes)).map_err(read_error))
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.done = true;
        let _ = self.stream.stop(VarInt::from_u64(error_code).unwrap_or(VarInt::MAX));
    }

    fn recv_id(&self) -> StreamId {
        self.id
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.stream.stop(VarInt::from_u64(H3_REQUEST_CANCELLED).unwrap_or(VarInt::MAX));
        }
    }
}

/// The sending half of a request stream: reset with H3_REQUEST_CANCELLED when dropped before
/// the request was finished (quinn's drop would finish it, a request cut short).
pub(crate) struct Send {
    stream: quinn::SendStream,
    writing: Option<WriteBuf<Bytes>>,
    id: StreamId,
    /// Finished or reset: nothing to cancel.
    finished: bool,
    traced: Option<Traced>,
}

impl quic::SendStream<Bytes> for Send {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        if let Some(data) = &mut self.writing {
            while data.has_remaining() {
                let n = ready!(Pin::new(&mut self.stream).poll_write(cx, data.chunk())).map_err(write_error)?;
                data.advance(n);
                if let Some(t) = &mut self.traced {
                    t.trace.data_moved(t.id, t.offset, n as u64, true);
                    t.offset += n as u64;
                }
            }
        }
        self.writing = None;
        Poll::Ready(Ok(()))
    }

    fn send_data<T: Into<WriteBuf<Bytes>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        if self.writing.is_some() {
            return Err(StreamErrorIncoming::Unknown("send_data while a write is pending".into()));
        }
        self.writing = Some(data.into());
        Ok(())
    }

    fn poll_finish(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.finished = true;
        if let Some(t) = &self.traced {
            t.trace.stream_state(t.id, Some(StreamState::Open), StreamState::HalfClosedLocal);
        }
        Poll::Ready(self.stream.finish().map_err(|e| StreamErrorIncoming::Unknown(Box::new(e))))
    }

    fn reset(&mut self, reset_code: u64) {
        self.finished = true;
        let _ = self.stream.reset(VarInt::from_u64(reset_code).unwrap_or(VarInt::MAX));
    }

    fn send_id(&self) -> StreamId {
        self.id
    }
}

impl Drop for Send {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.stream.reset(VarInt::from_u64(H3_REQUEST_CANCELLED).unwrap_or(VarInt::MAX));
        }
    }
}

/// As h3-quinn converts quinn's connection errors (the engine's error kinds read them so).
fn connection_error(e: ConnectionError) -> ConnectionErrorIncoming {
    match e {
        ConnectionError::ApplicationClosed(c) => {
            ConnectionErrorIncoming::ApplicationClose { error_code: c.error_code.into_inner() }
        }
        ConnectionError::TimedOut => ConnectionErrorIncoming::Timeout,
        e => ConnectionErrorIncoming::Undefined(Arc::new(e)),
    }
}

fn read_error(e: ReadError) -> StreamErrorIncoming {
    match e {
        ReadError::Reset(code) => StreamErrorIncoming::StreamTerminated { error_code: code.into_inner() },
        ReadError::ConnectionLost(e) => {
            StreamErrorIncoming::ConnectionErrorIncoming { connection_error: connection_error(e) }
        }
        e => StreamErrorIncoming::Unknown(Box::new(e)),
    }
}

fn write_error(e: WriteError) -> StreamErrorIncoming {
    match e {
        WriteError::Stopped(code) => StreamErrorIncoming::StreamTerminated { error_code: code.into_inner() },
        WriteError::ConnectionLost(e) => {
            StreamErrorIncoming::ConnectionErrorIncoming { connection_error: connection_error(e) }
        }
        e => StreamErrorIncoming::Unknown(Box::new(e)),
    }
}
