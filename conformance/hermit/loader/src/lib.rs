//! The loader's pure parts (no hardware access), unit-tested on the host:
//! `cargo test -p clockhal-hermit-loader --lib --target x86_64-unknown-linux-gnu`
//! in `conformance/kernels`.
#![no_std]

#[cfg(test)]
extern crate std;

pub mod devicetree;
pub mod fdt;
pub mod placement;
