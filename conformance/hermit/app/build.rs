//! Links the exported Hermit kernel (`libhermit.a`, see ../README.md): the
//! job upstream's `hermit` crate does, whose build script cannot run from
//! the crates.io package.
use std::path::PathBuf;

fn main() {
    let dir = match std::env::var_os("HERMIT_KERNEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"))
            .join("../kernel/target/export"),
    };
    let lib = dir.join("libhermit.a");
    if !lib.exists() {
        panic!(
            "{} not found: build the kernel first (./scripts/hermit.sh), or set HERMIT_KERNEL_DIR",
            lib.display()
        );
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=static=hermit");
    println!("cargo:rerun-if-env-changed=HERMIT_KERNEL_DIR");
    println!("cargo:rerun-if-changed={}", lib.display());
}
