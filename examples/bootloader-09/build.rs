//! bootloader 0.9 loads the kernel's segments at their link addresses and
//! applies no relocations: link a fixed-address executable, not the static
//! PIE that `x86_64-unknown-none` links by default (lld then places it at
//! 0x200000, as blog_os's custom target did).
fn main() {
    println!("cargo:rustc-link-arg-bins=-no-pie");
    println!("cargo:rerun-if-changed=build.rs");
}
