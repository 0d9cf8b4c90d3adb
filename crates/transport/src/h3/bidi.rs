//! A request stream made of its two halves, for h3's QUIC traits: what every implementation
//! of them here (the client's quinn streams, the responder's, the fuzzer's in-memory ones)
//! shares, each half doing the work.

use std::task::{Context, Poll};

use bytes::Buf;
use h3::quic::{self, StreamErrorIncoming, StreamId, WriteBuf};

/// A bidirectional stream: a sending half and a receiving half.
pub struct Bidi<S, R> {
    pub send: S,
    pub recv: R,
}

impl<B: Buf, S: quic::SendStream<B>, R: quic::RecvStream> quic::BidiStream<B> for Bidi<S, R> {
    type SendStream = S;
    type RecvStream = R;

    fn split(self) -> (S, R) {
        (self.send, self.recv)
    }
}

impl<S, R: quic::RecvStream> quic::RecvStream for Bidi<S, R> {
    type Buf = R::Buf;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<R::Buf>, StreamErrorIncoming>> {
        self.recv.poll_data(cx)
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.recv.stop_sending(error_code)
    }

    fn recv_id(&self) -> StreamId {
        self.recv.recv_id()
    }
}

impl<B: Buf, S: quic::SendStream<B>, R> quic::SendStream<B> for Bidi<S, R> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }

    fn send_data<T: Into<WriteBuf<B>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        self.send.send_data(data)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_finish(cx)
    }

    fn reset(&mut self, reset_code: u64) {
        self.send.reset(reset_code)
    }

    fn send_id(&self) -> StreamId {
        self.send.send_id()
    }
}
