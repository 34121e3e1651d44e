//! The `paycred` binary: the command line of [`paycred::cli`], run with mimalloc.

use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: the proxy path allocates and frees many small buffers
/// per request, and glibc's arena bookkeeping was a fifth of its instructions. Built with
/// `no_thp`: with transparent huge pages on, its eagerly committed arena kept ~40 MiB more
/// resident, for no CPU gain (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    paycred::cli::run()
}
