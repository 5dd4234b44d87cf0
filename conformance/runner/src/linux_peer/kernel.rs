//! The peer's kernel and init: a stock Debian cloud kernel fetched once with
//! `apt-get download` into `target/linux-peer/cache`, and
//! `conformance/linux-peer/init.c` built with `gcc -static`.
//!
//! The cloud flavour is Debian's smallest amd64 kernel (~27 MB package) and
//! has every clock driver built in (tsc, kvm-clock, hpet, acpi_pm, Hyper-V);
//! it boots on QEMU's pc, q35 and microvm machines.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The meta package whose dependency names the current kernel package.
const META: &str = "linux-image-cloud-amd64";
/// Records what the cache holds, written last (its presence means complete).
const STAMP: &str = "kernel.txt";

/// A kernel ready to boot.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// The bzImage.
    pub vmlinuz: PathBuf,
    /// Debian package name and version, e.g.
    /// `linux-image-6.1.0-57-cloud-amd64 6.1.192-3`.
    pub package: String,
}

/// Runs a command, returning its stdout or an error that says what failed.
fn run(cmd: &mut Command) -> Result<String, String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{shown} failed ({}): {}",
            out.status,
            err.trim().lines().last().unwrap_or("")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The kernel package `apt-cache depends META` names.
pub fn package_from_depends(depends: &str) -> Option<&str> {
    depends.lines().find_map(|l| {
        let dep = l.trim().strip_prefix("Depends: ")?;
        dep.starts_with("linux-image-").then_some(dep.trim())
    })
}

fn resolve() -> Result<String, String> {
    let out = run(Command::new("apt-cache").args(["depends", META]))?;
    package_from_depends(&out)
        .map(str::to_string)
        .ok_or_else(|| format!("apt-cache depends {META} names no linux-image package"))
}

fn find(dir: &Path, prefix: &str, suffix: &str) -> Option<PathBuf> {
    let mut hits: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix))
        })
        .collect();
    hits.sort();
    hits.pop()
}

/// Downloads the package's .deb into `cache` (refreshing the package lists
/// once if they are missing or stale), returns its path.
fn download(cache: &Path) -> Result<PathBuf, String> {
    let fetch = || -> Result<PathBuf, String> {
        let pkg = resolve()?;
        if let Some(deb) = find(cache, &format!("{pkg}_"), ".deb") {
            return Ok(deb);
        }
        // As root, apt's sandbox user could not write into `cache`.
        run(Command::new("apt-get")
            .args(["download", "-q", "-o", "APT::Sandbox::User=root", &pkg])
            .current_dir(cache))?;
        find(cache, &format!("{pkg}_"), ".deb")
            .ok_or_else(|| format!("apt-get download {pkg} left no .deb in {}", cache.display()))
    };
    fetch().or_else(|first| {
        eprintln!("linux peer: {first}; running apt-get update");
        run(Command::new("apt-get").args(["update", "-qq"]))
            .map_err(|e| format!("{first}; then {e}"))?;
        fetch()
    })
}

/// Extracts only `/boot/vmlinuz-*` from the .deb (the modules are not needed).
fn extract(deb: &Path, cache: &Path) -> Result<PathBuf, String> {
    let mut dpkg = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run dpkg-deb: {e}"))?;
    let tar_in = dpkg.stdout.take().ok_or("dpkg-deb has no stdout")?;
    let tar = Command::new("tar")
        .args(["-x", "--wildcards", "-C"])
        .arg(cache)
        .arg("./boot/vmlinuz-*")
        .stdin(tar_in)
        .status();
    let dpkg = dpkg.wait();
    match (dpkg, tar) {
        (Ok(d), Ok(t)) if d.success() && t.success() => {}
        (d, t) => {
            return Err(format!(
                "extracting vmlinuz from {} failed (dpkg-deb {d:?}, tar {t:?})",
                deb.display()
            ))
        }
    }
    find(&cache.join("boot"), "vmlinuz-", "")
        .ok_or_else(|| format!("{} holds no boot/vmlinuz-*", deb.display()))
}

fn read_stamp(cache: &Path) -> Option<Kernel> {
    let text = std::fs::read_to_string(cache.join(STAMP)).ok()?;
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            .map(str::to_string)
    };
    let k = Kernel {
        vmlinuz: PathBuf::from(get("vmlinuz")?),
        package: get("package")?,
    };
    k.vmlinuz.is_file().then_some(k)
}

/// The cached kernel, fetched first if the cache lacks it.
pub fn obtain(cache: &Path) -> Result<Kernel, String> {
    if let Some(k) = read_stamp(cache) {
        return Ok(k);
    }
    std::fs::create_dir_all(cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    eprintln!(
        "linux peer: fetching the {META} kernel into {}",
        cache.display()
    );
    let deb = download(cache)?;
    let vmlinuz = extract(&deb, cache)?;
    let field = |f: &str| run(Command::new("dpkg-deb").arg("-f").arg(&deb).arg(f));
    let package = format!("{} {}", field("Package")?.trim(), field("Version")?.trim());
    let stamp = format!("package={package}\nvmlinuz={}\n", vmlinuz.display());
    std::fs::write(cache.join(STAMP), stamp).map_err(|e| format!("{STAMP}: {e}"))?;
    Ok(Kernel { vmlinuz, package })
}

/// Builds `source` (init.c) into `out` as a static executable.
pub fn build_init(source: &Path, out: &Path) -> Result<(), String> {
    run(Command::new("gcc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-static", "-o"])
        .arg(out)
        .arg(source))
    .map(drop)
    .map_err(|e| format!("{e} (gcc -static needs libc6-dev's libc.a)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_package_is_the_meta_packages_dependency() {
        let out = "linux-image-cloud-amd64\n  Depends: linux-image-6.1.0-57-cloud-amd64\n";
        assert_eq!(
            package_from_depends(out),
            Some("linux-image-6.1.0-57-cloud-amd64")
        );
        let odd = "linux-image-cloud-amd64\n  Depends: <virtual>\n  Recommends: linux-image-x\n";
        assert_eq!(package_from_depends(odd), None);
    }
}
