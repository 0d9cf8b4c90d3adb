//! h3's QUIC interface on quinn, as h3-quinn has it, but with the request streams in hand:
//! h3-quinn keeps quinn's streams to itself, and a graceful close needs to know when each
//! response was acknowledged (quinn's `SendStream::stopped`), a request whose answer is
//! dropped or delayed needs to know when the client stops its stream (to free it at once), and
//! the requests at or beyond a GOAWAY are refused. The control and QPACK streams stay
//! h3-quinn's.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use h3::error::Code;
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};
use quinn::{ConnectionError, ReadError, VarInt, WriteError};

use volley_transport::qlog::{StreamState, Trace};

use crate::quic::Unacked;

type Accept = Pin<Box<dyn Future<Output = Result<(quinn::SendStream, quinn::RecvStream), ConnectionError>>>>;

/// Resolves when the client stops a request stream (`Some(code)`), once its response was
/// acknowledged (`None`), or when the connection ends (quinn's `SendStream::stopped`).
pub(crate) type Stopped = Pin<Box<dyn Future<Output = Result<Option<VarInt>, quinn::StoppedError>>>>;

/// What the connection's task and its transport share.
#[derive(Default)]
pub(crate) struct Shared {
    /// The last request stream handed to h3.
    last: Cell<Option<u64>>,
    /// Request streams from this ID on are refused unprocessed (H3_REQUEST_REJECTED): the
    /// ID a GOAWAY announced.
    refuse_from: Cell<Option<u64>>,
    /// For each request stream handed to h3 and not yet taken by its request's task: when
    /// the client stops it. (h3 hands out the request, not the stream.)
    stopped: RefCell<HashMap<StreamId, Stopped>>,
}

impl Shared {
    /// A GOAWAY goes out: requests from the stream after the last one taken (the ID the
    /// GOAWAY carries, RFC 9114 section 5.2), or from the first when none was, are refused.
    pub(crate) fn goaway(&self) {
        self.refuse_from.set(Some(self.last.get().map_or(0, |l| l + 4)));
    }

    /// When the client stops request stream `id` (taken once, by the request's task).
    pub(crate) fn take_stopped(&self, id: StreamId) -> Option<Stopped> {
        self.stopped.borrow_mut().remove(&id)
    }
}

/// One QUIC connection under h3.
pub(crate) struct Conn {
    quic: quinn::Connection,
    inner: h3_quinn::Connection,
    accepting: Option<Accept>,
    shared: Rc<Shared>,
    /// Counts each request stream until its response is acknowledged (when the connection
    /// may be closed gracefully).
    unacked: Option<Rc<Unacked>>,
    /// Where the request streams' events go (`--qlog`).
    trace: Option<Trace>,
}

impl Conn {
    pub(crate) fn new(quic: quinn::Connection, shared: Rc<Shared>, unacked: Option<Rc<Unacked>>) -> Conn {
        let inner = h3_quinn::Connection::new(quic.clone());
        let trace = volley_transport::qlog::of(&quic);
        Conn { quic, inner, accepting: None, shared, unacked, trace }
    }
}

/// A traced request stream's half: where its events go, and the bytes moved so far.
#[derive(Clone)]
struct Traced {
    trace: Trace,
    id: u64,
    offset: u64,
}

impl<B: Buf> quic::Connection<B> for Conn {
    type RecvStream = h3_quinn::RecvStream;
    type OpenStreams = Opener;

    fn poll_accept_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::RecvStream, ConnectionErrorIncoming>> {
        quic::Connection::<B>::poll_accept_recv(&mut self.inner, cx)
    }

    fn poll_accept_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::BidiStream, ConnectionErrorIncoming>> {
        loop {
            let accepting = self.accepting.get_or_insert_with(|| {
                let c = self.quic.clone();
                Box::pin(async move { c.accept_bi().await })
            });
            let r = ready!(accepting.as_mut().poll(cx));
            self.accepting = None;
            let (mut send, mut recv) = r.map_err(connection_error)?;
            let id = u64::from(send.id());
            let sid = StreamId::try_from(id).ok();
            match (sid, self.shared.refuse_from.get()) {
                (Some(sid), refuse) if refuse.is_none_or(|r| id < r) => {
                    self.shared.last.set(Some(id));
                    if let Some(u) = &self.unacked {
                        u.track(&send);
                    }
                    self.shared.stopped.borrow_mut().insert(sid, Box::pin(send.stopped()));
                    if let Some(t) = &self.trace {
                        t.stream_state(id, None, StreamState::Open);
                    }
                    let traced = self.trace.clone().map(|trace| Traced { trace, id, offset: 0 });
                    let send = Send { stream: send, writing: None, id: sid, traced: traced.clone() };
                    let recv = Recv { stream: recv, id: sid, traced };
                    return Poll::Ready(Ok(Bidi { send, recv }));
                }
                _ => {
                    let code = VarInt::from_u64(Code::H3_REQUEST_REJECTED.value()).unwrap_or(VarInt::MAX);
                    let _ = recv.stop(code);
                    let _ = send.reset(code);
                }
            }
        }
    }

    fn opener(&self) -> Self::OpenStreams {
        Opener(quic::Connection::<B>::opener(&self.inner))
    }
}

impl<B: Buf> quic::OpenStreams<B> for Conn {
    type BidiStream = Bidi<B>;
    type SendStream = h3_quinn::SendStream<B>;

    fn poll_open_bidi(&mut self, _cx: &mut Context<'_>) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        Poll::Ready(Err(no_bidi()))
    }

    fn poll_open_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_send(&mut self.inner, cx)
    }

    fn close(&mut self, code: Code, reason: &[u8]) {
        quic::OpenStreams::<B>::close(&mut self.inner, code, reason)
    }
}

/// Opens the server's streams (control, QPACK): h3-quinn's.
pub(crate) struct Opener(h3_quinn::OpenStreams);

impl<B: Buf> quic::OpenStreams<B> for Opener {
    type BidiStream = Bidi<B>;
    type SendStream = h3_quinn::SendStream<B>;

    fn poll_open_bidi(&mut self, _cx: &mut Context<'_>) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        Poll::Ready(Err(no_bidi()))
    }

    fn poll_open_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_send(&mut self.0, cx)
    }

    fn close(&mut self, code: Code, reason: &[u8]) {
        quic::OpenStreams::<B>::close(&mut self.0, code, reason)
    }
}

/// An HTTP/3 server opens no request streams (RFC 9114 section 6.1).
fn no_bidi() -> StreamErrorIncoming {
    StreamErrorIncoming::Unknown("an HTTP/3 server opens no bidirectional stream".into())
}

/// A request stream.
pub(crate) type Bidi<B> = volley_transport::h3::Bidi<Send<B>, Recv>;

/// The receiving half of a request stream.
pub(crate) struct Recv {
    stream: quinn::RecvStream,
    id: StreamId,
    traced: Option<Traced>,
}

impl quic::RecvStream for Recv {
    type Buf = Bytes;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        // quinn's read is cancel-safe: a read polled once and dropped loses nothing.
        let r = ready!(pin!(self.stream.read_chunk(usize::MAX, true)).poll(cx));
        if let Some(t) = &self.traced {
            match &r {
                Ok(Some(c)) => t.trace.data_moved(t.id, c.offset, c.bytes.len() as u64, false),
                Ok(None) => t.trace.stream_state(t.id, Some(StreamState::Open), StreamState::HalfClosedRemote),
                Err(_) => {}
            }
        }
        Poll::Ready(r.map(|c| c.map(|c| c.bytes)).map_err(read_error))
    }

    fn stop_sending(&mut self, error_code: u64) {
        let _ = self.stream.stop(VarInt::from_u64(error_code).unwrap_or(VarInt::MAX));
    }

    fn recv_id(&self) -> StreamId {
        self.id
    }
}

/// The sending half of a request stream.
pub(crate) struct Send<B: Buf> {
    stream: quinn::SendStream,
    writing: Option<WriteBuf<B>>,
    id: StreamId,
    traced: Option<Traced>,
}

impl<B: Buf> quic::SendStream<B> for Send<B> {
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

    fn send_data<T: Into<WriteBuf<B>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        if self.writing.is_some() {
            return Err(StreamErrorIncoming::Unknown("send_data while a write is pending".into()));
        }
        self.writing = Some(data.into());
        Ok(())
    }

    fn poll_finish(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        if let Some(t) = &self.traced {
            t.trace.stream_state(t.id, None, StreamState::Closed);
        }
        Poll::Ready(self.stream.finish().map_err(|e| StreamErrorIncoming::Unknown(Box::new(e))))
    }

    fn reset(&mut self, reset_code: u64) {
        let _ = self.stream.reset(VarInt::from_u64(reset_code).unwrap_or(VarInt::MAX));
    }

    fn send_id(&self) -> StreamId {
        self.id
    }
}

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
