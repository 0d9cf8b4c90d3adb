//! The link's XDP device (`volley link --device xdp`): veth pairs and AF_XDP sockets instead of
//! two TUN devices.
//!
//! ```text
//!  namespace            forwarder's namespace              host
//!  link0 ─── veth ─── a0 [XDP: all to socket A]
//!                                    forwarder (pipes)
//!                     b0 [XDP: all to socket B] ─── veth ─── vlPIDhN (the host's address)
//! ```
//!
//! Every frame the namespace sends arrives on a0, whose XDP program hands it to AF_XDP socket
//! A; the forwarder takes the IP packet out of it, passes it through the up pipe and, when it
//! is due, puts it in a frame for the host's end on socket B's TX ring (the kernel sends it
//! out of b0, into the host's stack). The way down mirrors it. a0 and b0 live in a namespace
//! of their own that only the process holds, so that the pairs go with the process however it
//! ends (a namespace's devices are removed with it; removing one end of a veth pair removes
//! both). Both Ethernet ends of the link resolve no neighbours (no ARP, no neighbour
//! discovery: IFF_NOARP): the forwarder writes each frame's addresses itself.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use volley_xsk::{bpf, Umem, FRAME};

/// Frames of each socket's UMEM: half to receive into, half to send from.
const FRAMES: u32 = 4096;
/// An Ethernet header.
const ETH: usize = 14;

/// One side of the forwarder: an AF_XDP socket on a veth end whose XDP program hands it every
/// frame, and the frames it sends from.
pub struct Port {
    umem: Umem,
    /// Send frames not in the kernel's hands.
    free: Vec<u64>,
    /// The Ethernet addresses of every frame sent: destination (the far end), source (ours).
    eth: [u8; 12],
    /// Frames on the TX ring since the last [`Port::flush`].
    pending: bool,
    /// The program runs natively in the veth driver (else generically, after a socket buffer).
    pub native: bool,
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
}

/// What failed while making a port: the step, and the kernel's error.
pub type Failure = (&'static str, io::Error);

impl Port {
    /// Takes every frame of interface `iface` (in the calling thread's namespace): an AF_XDP
    /// socket bound to its queue 0 in copy mode (veth has no zero-copy) and the XDP program
    /// that redirects every frame to it, attached natively where the driver allows.
    pub fn open(iface: &str) -> Result<Port, Failure> {
        let ifindex = crate::sys::ifindex(iface).map_err(|e| ("find the XDP device", e))?;
        let mut umem = Umem::new(FRAMES).map_err(|e| ("make an AF_XDP socket", e))?;
        umem.fill_all(0..FRAMES / 2);
        umem.bind(ifindex, 0, false).map_err(|e| ("bind an AF_XDP socket", e))?;
        let map = bpf::xskmap(1).map_err(|e| ("make an XDP socket map", e))?;
        bpf::map_set(map.as_raw_fd(), 0, umem.fd()).map_err(|e| ("put the AF_XDP socket in its map", e))?;
        let prog = bpf::load_redirect_all(map.as_raw_fd()).map_err(|e| ("load the XDP program", e))?;
        let (link, native) = match bpf::attach(&prog, ifindex, bpf::XDP_FLAGS_DRV_MODE) {
            Ok(l) => (l, true),
            Err(_) => (
                bpf::attach(&prog, ifindex, bpf::XDP_FLAGS_SKB_MODE).map_err(|e| ("attach the XDP program", e))?,
                false,
            ),
        };
        let free = (FRAMES / 2..FRAMES).map(|i| u64::from(i) * FRAME as u64).collect();
        Ok(Port { umem, free, eth: [0; 12], pending: false, native, _link: link, _prog: prog, _map: map })
    }

    /// The Ethernet addresses of the frames this port sends: `dst` the far end's, `src` its own.
    pub fn address(&mut self, dst: [u8; 6], src: [u8; 6]) {
        self.eth[..6].copy_from_slice(&dst);
        self.eth[6..].copy_from_slice(&src);
    }

    /// The socket (readable when frames wait on its RX ring).
    pub fn fd(&self) -> RawFd {
        self.umem.fd()
    }

    /// The IP packet of the next frame received into `buf`: its length, or None when no frame
    /// waits. Frames that carry no IPv4 or IPv6 packet are dropped.
    pub fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        let mut d = [(0u64, 0u32)];
        loop {
            if self.umem.rx(&mut d) == 0 {
                return None;
            }
            let (addr, len) = d[0];
            let f = self.umem.data(addr, len);
            let ip = f.len() > ETH && matches!([f[12], f[13]], [0x08, 0x00] | [0x86, 0xdd]);
            let n = if ip { (f.len() - ETH).min(buf.len()) } else { 0 };
            if ip {
                buf[..n].copy_from_slice(&f[ETH..ETH + n]);
            }
            self.umem.refill(std::iter::once(addr));
            if ip {
                return Some(n);
            }
        }
    }

    /// Puts `packet` (IPv4 or IPv6) on the TX ring in a frame to the far end; false when it
    /// cannot (too long, or the ring or the frames are all in the kernel's hands). It leaves
    /// with the next [`Port::flush`].
    pub fn send(&mut self, packet: &[u8]) -> bool {
        if packet.is_empty() || ETH + packet.len() > FRAME {
            return false;
        }
        if self.free.is_empty() {
            self.umem.complete(&mut self.free);
        }
        if self.umem.tx_room() == 0 {
            return false;
        }
        let Some(addr) = self.free.pop() else { return false };
        let f = self.umem.frame_mut(addr);
        f[..12].copy_from_slice(&self.eth);
        f[12..14].copy_from_slice(if packet[0] >> 4 == 6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
        f[ETH..ETH + packet.len()].copy_from_slice(packet);
        self.umem.tx_push(addr, (ETH + packet.len()) as u32);
        self.pending = true;
        true
    }

    /// Has the kernel send the frames put on the TX ring, and takes back those it has sent.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.pending {
            self.pending = false;
            self.umem.tx_commit();
            self.umem.kick()?;
        }
        self.umem.complete(&mut self.free);
        Ok(())
    }
}
