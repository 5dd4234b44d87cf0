//! `clockhal-bootloader-image KERNEL OUT_DIR`: writes `OUT_DIR/bios.img`
//! (boot with `-drive format=raw,file=bios.img`) and `OUT_DIR/uefi.img`
//! (with `-bios OVMF.fd -drive format=raw,file=uefi.img`) for a kernel ELF
//! built on `bootloader_api` 0.11.
use bootloader::DiskImageBuilder;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [kernel, out] = args.as_slice() else {
        eprintln!("usage: clockhal-bootloader-image KERNEL OUT_DIR");
        return ExitCode::from(2);
    };
    if let Err(e) = std::fs::create_dir_all(out) {
        eprintln!("cannot create {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    let builder = DiskImageBuilder::new(kernel.clone());
    for (name, result) in [
        ("bios.img", builder.create_bios_image(&out.join("bios.img"))),
        ("uefi.img", builder.create_uefi_image(&out.join("uefi.img"))),
    ] {
        match result {
            Ok(()) => println!("{}", out.join(name).display()),
            Err(e) => {
                eprintln!("{name}: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
