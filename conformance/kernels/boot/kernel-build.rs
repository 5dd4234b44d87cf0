//! The build script of every kernel that clockhal-boot boots (each names it
//! with `build = ".../boot/kernel-build.rs"`): links the kernel with
//! clockhal-boot's linker script (PVH note, load address; see its README).
fn main() {
    let script = std::env::var("DEP_CLOCKHAL_BOOT_LINKER_SCRIPT").expect("clockhal-boot must be a direct dependency");
    println!("cargo:rustc-link-arg-bins=-T{script}");
    println!("cargo:rustc-link-arg-bins=-no-pie");
    println!("cargo:rerun-if-env-changed=DEP_CLOCKHAL_BOOT_LINKER_SCRIPT");
}
