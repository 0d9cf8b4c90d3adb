//! The XDP programs that hand frames to AF_XDP sockets (the target's answers for the
//! generator's `--xdp`; every frame for the link's `--device xdp`), assembled here instruction
//! by instruction (no compiler, no object file), and the `bpf(2)` calls that load them, make
//! their socket maps and attach them to an interface (a BPF link: detached when the last
//! descriptor of it closes, whatever ends the process).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`: generic XDP, after the driver made a socket buffer.
pub const XDP_FLAGS_SKB_MODE: u32 = 2;
/// `XDP_FLAGS_DRV_MODE`: native XDP, in the driver.
pub const XDP_FLAGS_DRV_MODE: u32 = 4;

const FUNC_KTIME_GET_NS: i32 = 5;
const FUNC_REDIRECT_MAP: i32 = 51;
const FUNC_XDP_ADJUST_META: i32 = 54;
const XDP_PASS: i32 = 2;

/// Written after the receive time in the metadata the program puts before each frame it
/// redirects, so that a frame without it (a driver without metadata) is told apart.
pub const META_MAGIC: u32 = 0x5644_5850;
/// Bytes of metadata before a redirected frame: receive time (u64, CLOCK_MONOTONIC ns), magic.
pub const META_LEN: usize = 16;

/// Attribute buffer for `bpf(2)`: zeroed beyond the fields set (the kernel checks).
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(&mut self, at: usize, v: u32) -> &mut Self {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, at: usize, v: u64) -> &mut Self {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

fn bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<i32> {
    // SAFETY: bpf(2) reads (and for some commands writes) the attribute buffer we own, whose
    // size we pass; pointers inside it point at live buffers of the caller.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut Attr, std::mem::size_of::<Attr>()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

fn owned(fd: i32) -> OwnedFd {
    // SAFETY: a descriptor bpf(2) just returned, owned by nothing else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Makes an XSKMAP with `entries` slots (one per receive queue).
pub fn xskmap(entries: u32) -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u32(0, BPF_MAP_TYPE_XSKMAP).u32(4, 4).u32(8, 4).u32(12, entries.max(1));
    a.0[28..40].copy_from_slice(b"volley_xsks\0");
    bpf(BPF_MAP_CREATE, &mut a).map(owned)
}

/// Puts AF_XDP socket `xsk` into `map` at `queue` (the descriptor is read in the calling
/// thread's table).
pub fn map_set(map: RawFd, queue: u32, xsk: RawFd) -> io::Result<()> {
    let key = queue;
    let value = xsk as u32;
    let mut a = Attr::new();
    a.u32(0, map as u32).u64(8, &key as *const u32 as u64).u64(16, &value as *const u32 as u64).u64(24, 0);
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

/// Loads the program for `target`'s answers, redirecting into `map`.
pub fn load(target: SocketAddr, map: RawFd) -> io::Result<OwnedFd> {
    load_program(&program(target, map))
}

/// Loads the program that hands every frame to the AF_XDP socket of its queue in `map`
/// ([`redirect_all`]).
pub fn load_redirect_all(map: RawFd) -> io::Result<OwnedFd> {
    load_program(&redirect_all(map))
}

/// Loads an XDP program. The verifier's log comes back in the error when it refuses it.
pub fn load_program(insns: &[Insn]) -> io::Result<OwnedFd> {
    let license = b"Dual MIT/GPL\0";
    let mut log = vec![0u8; 64 * 1024];
    let mut a = Attr::new();
    a.u32(0, BPF_PROG_TYPE_XDP)
        .u32(4, insns.len() as u32)
        .u64(8, insns.as_ptr() as u64)
        .u64(16, license.as_ptr() as u64)
        .u32(68, BPF_XDP);
    a.0[48..59].copy_from_slice(b"volley_xdp\0");
    match bpf(BPF_PROG_LOAD, &mut a) {
        Ok(fd) => Ok(owned(fd)),
        Err(e) if e.raw_os_error() == Some(libc::EACCES) || e.raw_os_error() == Some(libc::EINVAL) => {
            // Once more with the verifier's log, to say why.
            a.u32(24, 1).u32(28, log.len() as u32).u64(32, log.as_mut_ptr() as u64);
            let _ = bpf(BPF_PROG_LOAD, &mut a);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_string();
            Err(io::Error::new(e.kind(), format!("{e}: the verifier said: {last}")))
        }
        Err(e) => Err(e),
    }
}

/// Attaches `prog` to interface `ifindex` with `flags` (native or generic XDP) as a BPF link.
pub fn attach(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u32(0, prog.as_raw_fd() as u32).u32(4, ifindex).u32(8, BPF_XDP).u32(12, flags);
    bpf(BPF_LINK_CREATE, &mut a).map(owned)
}

/// One eBPF instruction.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (src << 4) | dst, off, imm }
}

/// A jump still to be pointed at its label.
enum Item {
    Op(Insn),
    Jump(Insn, Label),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Pass,
    Redirect,
    Go,
}

struct Asm {
    items: Vec<Item>,
    labels: Vec<(Label, usize)>,
}

impl Asm {
    fn op(&mut self, i: Insn) {
        self.items.push(Item::Op(i));
    }
    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.items.push(Item::Jump(insn(code, dst, src, 0, imm), to));
    }
    fn label(&mut self, l: Label) {
        self.labels.push((l, self.items.len()));
    }
    fn finish(self) -> Vec<Insn> {
        let at = |l: Label| self.labels.iter().find(|(x, _)| *x == l).map(|(_, i)| *i).expect("label placed");
        self.items
            .iter()
            .enumerate()
            .map(|(i, it)| match it {
                Item::Op(x) => *x,
                Item::Jump(x, l) => Insn { off: (at(*l) as isize - i as isize - 1) as i16, ..*x },
            })
            .collect()
    }
}

// Opcodes used below.
const LDXW: u8 = 0x61;
const LDXH: u8 = 0x69;
const LDXB: u8 = 0x71;
const STXDW: u8 = 0x7b;
const STW: u8 = 0x62;
const MOV_IMM: u8 = 0xb7;
const MOV_REG: u8 = 0xbf;
const ADD_IMM: u8 = 0x07;
const AND_IMM: u8 = 0x57;
const JA: u8 = 0x05;
const JNE_IMM: u8 = 0x55;
const JGT_REG: u8 = 0x2d;
const JNE32_IMM: u8 = 0x56;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
const LD_IMM64: u8 = 0x18;
const PSEUDO_MAP_FD: u8 = 1;

/// The program that hands every frame to the AF_XDP socket of the queue it arrived on in
/// `map` (a frame whose queue has no socket goes on to the kernel): an interface whose whole
/// traffic one process takes, such as the link's (`volley link --device xdp`).
pub fn redirect_all(map: RawFd) -> Vec<Insn> {
    vec![
        insn(LDXW, 2, 1, 16, 0), // r2 = ctx->rx_queue_index
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, map),
        insn(0, 0, 0, 0, 0),
        insn(MOV_IMM, 3, 0, 0, XDP_PASS), // no socket on this queue: to the kernel
        insn(CALL, 0, 0, 0, FUNC_REDIRECT_MAP),
        insn(EXIT, 0, 0, 0, 0),
    ]
}

/// The program: a frame from `target` (its IPv4 or IPv6 source address and UDP source port,
/// no IP options, extension headers or fragments) gets its receive time written before it
/// (metadata: [`META_LEN`] bytes) and goes to the AF_XDP socket of the queue it arrived on;
/// everything else goes on to the kernel (XDP_PASS), and so does a frame whose queue has no
/// socket.
pub fn program(target: SocketAddr, map: RawFd) -> Vec<Insn> {
    let mut a = Asm { items: Vec::new(), labels: Vec::new() };
    let port = i32::from(u16::from_ne_bytes(target.port().to_be_bytes()));
    a.op(insn(MOV_REG, 6, 1, 0, 0)); // r6 = ctx
    a.op(insn(LDXW, 2, 6, 0, 0)); // r2 = data
    a.op(insn(LDXW, 3, 6, 4, 0)); // r3 = data_end
    a.op(insn(MOV_REG, 4, 2, 0, 0));
    a.op(insn(ADD_IMM, 4, 0, 0, 42)); // Ethernet, IPv4, UDP
    a.jump(JGT_REG, 4, 3, 0, Label::Pass);
    a.op(insn(LDXH, 5, 2, 12, 0)); // EtherType
    match target {
        SocketAddr::V4(t) => {
            a.jump(JNE_IMM, 5, 0, 0x0008, Label::Pass); // 0x0800 as read little-endian
            a.op(insn(LDXB, 5, 2, 14, 0));
            a.jump(JNE_IMM, 5, 0, 0x45, Label::Pass); // IPv4, no options
            a.op(insn(LDXB, 5, 2, 23, 0));
            a.jump(JNE_IMM, 5, 0, 17, Label::Pass); // UDP
            a.op(insn(LDXH, 5, 2, 20, 0));
            a.op(insn(AND_IMM, 5, 0, 0, 0xff3f)); // more fragments, fragment offset
            a.jump(JNE_IMM, 5, 0, 0, Label::Pass);
            a.op(insn(LDXW, 5, 2, 26, 0));
            a.jump(JNE32_IMM, 5, 0, u32::from_ne_bytes(t.ip().octets()) as i32, Label::Pass);
            a.op(insn(LDXH, 5, 2, 34, 0));
            a.jump(JNE_IMM, 5, 0, port, Label::Pass);
            a.jump(JA, 0, 0, 0, Label::Redirect);
        }
        SocketAddr::V6(t) => {
            a.jump(JNE_IMM, 5, 0, 0xdd86, Label::Pass); // 0x86dd
            a.op(insn(MOV_REG, 4, 2, 0, 0));
            a.op(insn(ADD_IMM, 4, 0, 0, 62)); // Ethernet, IPv6, UDP
            a.jump(JGT_REG, 4, 3, 0, Label::Pass);
            a.op(insn(LDXB, 5, 2, 20, 0));
            a.jump(JNE_IMM, 5, 0, 17, Label::Pass); // next header UDP
            let o = t.ip().octets();
            for i in 0..4 {
                a.op(insn(LDXW, 5, 2, 22 + 4 * i as i16, 0));
                let w = u32::from_ne_bytes([o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]]);
                a.jump(JNE32_IMM, 5, 0, w as i32, Label::Pass);
            }
            a.op(insn(LDXH, 5, 2, 54, 0));
            a.jump(JNE_IMM, 5, 0, port, Label::Pass);
        }
    }
    a.label(Label::Redirect);
    a.op(insn(CALL, 0, 0, 0, FUNC_KTIME_GET_NS));
    a.op(insn(MOV_REG, 7, 0, 0, 0)); // r7 = receive time
    a.op(insn(MOV_REG, 1, 6, 0, 0));
    a.op(insn(MOV_IMM, 2, 0, 0, -(META_LEN as i32)));
    a.op(insn(CALL, 0, 0, 0, FUNC_XDP_ADJUST_META));
    a.jump(JNE_IMM, 0, 0, 0, Label::Go); // no metadata here: the frame goes without
    a.op(insn(LDXW, 2, 6, 8, 0)); // r2 = data_meta
    a.op(insn(LDXW, 3, 6, 0, 0)); // r3 = data
    a.op(insn(MOV_REG, 4, 2, 0, 0));
    a.op(insn(ADD_IMM, 4, 0, 0, META_LEN as i32));
    a.jump(JGT_REG, 4, 3, 0, Label::Go);
    a.op(insn(STXDW, 2, 7, 0, 0));
    a.op(insn(STW, 2, 0, 8, META_MAGIC as i32));
    a.op(insn(STW, 2, 0, 12, 0));
    a.label(Label::Go);
    a.op(insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, map));
    a.op(insn(0, 0, 0, 0, 0));
    a.op(insn(LDXW, 2, 6, 16, 0)); // rx_queue_index
    a.op(insn(MOV_IMM, 3, 0, 0, XDP_PASS)); // no socket on this queue: to the kernel
    a.op(insn(CALL, 0, 0, 0, FUNC_REDIRECT_MAP));
    a.op(insn(EXIT, 0, 0, 0, 0));
    a.label(Label::Pass);
    a.op(insn(MOV_IMM, 0, 0, 0, XDP_PASS));
    a.op(insn(EXIT, 0, 0, 0, 0));
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels() {
        for t in ["192.0.2.1:53", "[2001:db8::1]:5353"] {
            let p = program(t.parse().unwrap(), 7);
            // Every jump stays inside the program.
            for (i, x) in p.iter().enumerate() {
                if x.code & 0x07 == 0x05 || x.code & 0x07 == 0x06 {
                    if x.code == CALL || x.code == EXIT {
                        continue;
                    }
                    let to = i as isize + 1 + x.off as isize;
                    assert!(to > 0 && (to as usize) < p.len(), "jump {i} to {to}");
                }
            }
            assert_eq!(p.last().unwrap().code, EXIT);
        }
        let p = redirect_all(7);
        assert_eq!(p.last().unwrap().code, EXIT);
        assert!(p.iter().any(|x| x.code == CALL && x.imm == FUNC_REDIRECT_MAP));
    }
}
