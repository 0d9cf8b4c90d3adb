//! `volley`: the command line. Flags live in `cli.rs`; each subcommand in `cmd/`.

mod args;
mod cli;
mod cmd;
mod error;
mod neighbours;

fn main() {
    volley_transport::tls::install_crypto_provider();
    silence_tracing();
    raise_open_files_limit();
    let code = match cli::run() {
        Ok(()) => 0,
        Err(e) => e.report(),
    };
    std::process::exit(code);
}

/// Installs a no-op global tracing dispatcher. Nothing in volley reads tracing output, but
/// with no dispatcher at all, tracing's `log` fallback (a feature quinn turns on) builds and
/// records every disabled span h2, hyper and quinn open — several per HTTP/2 request, some
/// 5 % of the CPU under DoH/2 load, in the responder and the generator alike. With one, those
/// spans are `Span::none()` and cost nearly nothing.
fn silence_tracing() {
    let _ = tracing::dispatcher::set_global_default(tracing::Dispatch::none());
}

/// Load generation and serving hold a socket per connection: the soft limit on open files is
/// raised to the hard limit (and, when allowed, the hard limit to the kernel's maximum), so
/// that tens of thousands of connections need no `ulimit -n` first.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        let max = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse::<libc::rlim_t>().ok())
            .unwrap_or(lim.rlim_max)
            .min(1 << 20);
        if max > lim.rlim_max {
            let want = libc::rlimit { rlim_cur: max, rlim_max: max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                return;
            }
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &want);
        }
    }
}
