//! Links the crates.io Hermit kernel (library name `hermit`) into one static
//! archive. Nothing of our own: the kernel is used exactly as published.
#![no_std]

extern crate hermit;
