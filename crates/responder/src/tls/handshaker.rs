//! The costly step of TLS handshakes over TCP (DoT, DoH) in turns, each after the I/O thread
//! has looked at its sockets: a wave of handshakes does not queue its work ahead of the
//! answers to established connections.
//!
//! A server handshake's work is almost all in one synchronous step: rustls taking the
//! ClientHello (`Accepted::into_connection`: the key exchange, and the signature of the
//! server's first flight), about 0.15 to 0.3 ms of CPU. An I/O thread runs its ready tasks in
//! turn and looks at its sockets again only between rounds of up to 61 of them: when
//! hundreds of clients reconnect together (or an attacker does), each round took dozens of
//! those steps, several ms, while an established client's query waited for the next look.
//! Here each step waits for the thread's one turn, and the task that has it yields once
//! before the step (`yield_now`: the runtime first polls its sockets, and the tasks they wake
//! run ahead of it). A query arriving during a wave waits for at most the step in progress.
//! Handshakes lose nothing: on one thread they ran one after another anyway.

use tokio::sync::Semaphore;

/// One I/O thread's turns for the costly handshake step.
pub(crate) struct Handshaker {
    turn: Semaphore,
}

impl Default for Handshaker {
    fn default() -> Handshaker {
        Handshaker { turn: Semaphore::new(1) }
    }
}

impl Handshaker {
    /// Runs `f` (a handshake's costly step) when its turn comes, after the thread has looked
    /// at its sockets. None only if the turns have ended (never: the semaphore is not closed).
    pub(crate) async fn run<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        let _turn = self.turn.acquire().await.ok()?;
        tokio::task::yield_now().await;
        Some(f())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Three handshake steps ready at once, the first of which makes a socket readable: the
    /// task waiting on that socket runs before the second step, not after the third.
    #[test]
    fn a_ready_socket_is_served_between_handshake_steps() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            let order = Rc::new(RefCell::new(Vec::new()));
            let h = Rc::new(Handshaker::default());
            let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let to = client.local_addr().unwrap();
            let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let o = order.clone();
            let answered = tokio::task::spawn_local(async move {
                let mut buf = [0u8; 8];
                client.recv(&mut buf).await.unwrap();
                o.borrow_mut().push("answer");
            });
            // Let the client wait on its socket first.
            tokio::task::yield_now().await;
            let steps: Vec<_> = (0..3)
                .map(|i| {
                    let (h, o, peer) = (h.clone(), order.clone(), peer.try_clone().unwrap());
                    tokio::task::spawn_local(async move {
                        h.run(|| {
                            if i == 0 {
                                peer.send_to(b"answer", to).unwrap();
                            }
                            // The step's work: long enough for the datagram to arrive.
                            std::thread::sleep(std::time::Duration::from_millis(20));
                            o.borrow_mut().push(["step 0", "step 1", "step 2"][i]);
                        })
                        .await
                    })
                })
                .collect();
            for s in steps {
                s.await.unwrap().unwrap();
            }
            answered.await.unwrap();
            assert_eq!(*order.borrow(), ["step 0", "answer", "step 1", "step 2"]);
        });
    }
}
