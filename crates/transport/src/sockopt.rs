//! Socket options socket2 does not name: one `setsockopt(2)` with an int, for every layer.

use std::io;
use std::os::fd::RawFd;

/// Sets the int option `name` at `level` on `fd` to `value`.
pub fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: setsockopt(2) reads an int we own, of the size given; a descriptor that is
    // not an open socket is an error (EBADF, ENOTSOCK), not undefined behaviour.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
