//! Mounting and INIT, through `fuser`: its `Session::new` mounts (the syscall as root,
//! `fusermount3` otherwise) and answers INIT with what [`Handshake::init`] asks for, which
//! includes `FUSE_OVER_IO_URING` when the io_uring transport may be used. `fuser` 0.18 has no
//! io_uring transport and its request loop reads /dev/fuse only, so the session is not run:
//! from INIT on, the requests are read and answered by `devfuse.rs` and `uring.rs` through
//! one decoder (`request.rs`). `fuser` keeps the mount (dropping it unmounts), the notifier
//! (`inval_inode`, `inval_entry` go through /dev/fuse on both transports) and unmounting.

use super::dispatch::Negotiated;
use super::uring::DEPTH;
use crate::config::KernelCache;
use fuser::{Filesystem, InitFlags, KernelConfig, Request};
use std::sync::{Arc, Mutex};

/// Largest read and write request: 1 MiB.
pub const MAX_IO: u32 = 1 << 20;

/// How many background requests the kernel lets be under way at once on the mount, with
/// `cpus` possible CPUs: one for every ring entry (a queue of [`DEPTH`] per CPU), 16 at least.
///
/// Asynchronous reads (`O_DIRECT` through libaio or io_uring, with `FUSE_ASYNC_DIO`) and
/// read-ahead are background requests, and the limit is the mount's, not a queue's: the
/// kernel's default is 12 and `fuser` asks 16, so two programs on two CPUs, each with 16 reads
/// in flight, had 16 under way between them, the others waiting in the kernel.
pub fn background_limit(cpus: usize) -> u16 {
    cpus.saturating_mul(DEPTH).clamp(16, u16::MAX as usize) as u16
}

/// The `fuser::Filesystem` whose only callback is INIT.
pub struct Handshake {
    pub cache: KernelCache,
    /// Ask for FUSE_OVER_IO_URING (`transport=auto` or `uring`).
    pub want_uring: bool,
    /// What was settled, for the transports.
    pub out: Arc<Mutex<Negotiated>>,
}

impl Filesystem for Handshake {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let mut neg = Negotiated {
            max_write: MAX_IO,
            ..Default::default()
        };
        if let Err(n) = config.set_max_write(MAX_IO) {
            log::info!("kernel limits max_write to {n}");
            let _ = config.set_max_write(n);
            neg.max_write = n;
        }
        let _ = config.set_max_readahead(MAX_IO);
        let cpus = crate::sys::fusedev::possible_cpus().unwrap_or(1);
        let limit = background_limit(cpus);
        if config.set_max_background(limit).is_ok() {
            // The kernel stops read-ahead beyond what is asked while this many are under way.
            let _ = config.set_congestion_threshold(limit - limit / 4);
        }
        for flag in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_ASYNC_DIO,
        ]
        .into_iter()
        .chain(
            self.cache
                .symlinks
                .then_some(InitFlags::FUSE_CACHE_SYMLINKS),
        )
        .chain(self.cache.acls.then_some(InitFlags::FUSE_POSIX_ACL))
        .chain(
            self.cache
                .inval_data_on_change
                .then_some(InitFlags::FUSE_AUTO_INVAL_DATA),
        ) {
            if let Err(refused) = config.add_capabilities(flag) {
                log::info!("kernel refused {refused:?}");
            }
        }
        if self.cache.zero_message_opendir {
            match config.add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT) {
                Ok(()) => neg.no_opendir = true,
                Err(refused) => log::info!("kernel refused {refused:?}"),
            }
        }
        match config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2) {
            Ok(()) => neg.drops_privs = true,
            Err(refused) => log::info!("kernel refused {refused:?}"),
        }
        if self.cache.passthrough {
            // Backing files on a plain filesystem: this mount may itself be stacked once.
            let depth = config.set_max_stack_depth(1);
            match (depth, config.add_capabilities(InitFlags::FUSE_PASSTHROUGH)) {
                (Ok(_), Ok(())) => neg.passthrough = true,
                _ => log::error!(
                    "passthrough=ro: the kernel does not offer FUSE passthrough; every open \
                     goes through the daemon"
                ),
            }
        }
        // The kernel offers it only while /sys/module/fuse/parameters/enable_uring is Y.
        if self.want_uring {
            neg.uring = config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok();
        }
        *self.out.lock().unwrap_or_else(|e| e.into_inner()) = neg;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ring_entry_may_carry_a_background_request() {
        assert_eq!(background_limit(1), 16);
        assert_eq!(background_limit(2), 32);
        assert_eq!(background_limit(64), 1024);
        assert_eq!(background_limit(0), 16);
        assert_eq!(background_limit(usize::MAX), u16::MAX);
    }
}
