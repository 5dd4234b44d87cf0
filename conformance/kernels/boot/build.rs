//! Exports the linker script's path to dependents and links this crate's own
//! examples with it.
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let script = dir.join("linker.ld");
    // Dependents (kernels) read this as DEP_CLOCKHAL_BOOT_LINKER_SCRIPT.
    println!("cargo:linker_script={}", script.display());
    // Our own examples are kernels too.
    println!("cargo:rustc-link-arg-examples=-T{}", script.display());
    println!("cargo:rustc-link-arg-examples=-no-pie");
    println!("cargo:rerun-if-changed=linker.ld");
    println!("cargo:rerun-if-changed=build.rs");
}
