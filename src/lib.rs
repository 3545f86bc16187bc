//! mirrorfs: a FUSE filesystem that keeps every file on several backing directories ("legs")
//! and routes each read to the leg that will answer fastest.
//!
//! Layers, top to bottom (a module never imports one above it, nor one beside it):
//! `cli` → `daemon` → `fuse` → `fs` → {`recovery`, `config`} → {`mirror`, `stats`} →
//! `integrity` → `meta` → {`tree`, `leg`, `policy`} → `sys` → {`errno`, `value`}.
//! `scripts/module-deps.py` checks it; see `docs/architecture.md`.

#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cli;
pub mod config;
pub(crate) mod daemon;
pub mod errno;
pub mod fs;
pub mod fuse;
pub mod integrity;
pub mod leg;
pub mod lock_order;
pub mod meta;
pub mod mirror;
pub mod policy;
pub mod recovery;
pub mod stats;
#[allow(unsafe_code)]
pub mod sys;
pub mod tree;
pub mod value;
