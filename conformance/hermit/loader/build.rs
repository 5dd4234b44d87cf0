//! Links the kernel with clockhal-boot's linker script (see its README).
fn main() {
    let script = std::env::var("DEP_CLOCKHAL_BOOT_LINKER_SCRIPT")
        .expect("clockhal-boot must be a direct dependency");
    println!("cargo:rustc-link-arg-bins=-T{script}");
    println!("cargo:rustc-link-arg-bins=-no-pie");
    println!("cargo:rerun-if-env-changed=DEP_CLOCKHAL_BOOT_LINKER_SCRIPT");
}
