//! `clockhal-hermit-export IN.a OUT.a --objcopy PATH/llvm-objcopy`
//!
//! The Hermit kernel is a static library that an application links into one
//! ELF. Both contain their own `core`, `alloc` and `compiler_builtins`, so
//! upstream's build (its xtask) "exports" the kernel archive first; this is
//! the same step:
//!
//! 1. keep global only the application ABI: the `sys_*` functions defined by
//!    the kernel crate itself (members named `hermit-*`) and the entry
//!    symbols in [`ENTRY_SYMBOLS`];
//! 2. rename every other defined global symbol with the `hermit` prefix
//!    (`llvm-objcopy --redefine-syms`), so the kernel's copies of the
//!    runtime cannot clash with the application's;
//! 3. set every member's ELF OSABI to 255 (`ELFOSABI_STANDALONE`), which the
//!    linked image must carry for Hermit's loaders;
//! 4. read the result back and check all of the above.
//!
//! A Rust tool rather than a script: the archive walk and the checks are
//! unit-tested, and CI needs nothing but cargo and the pinned toolchain's
//! llvm-objcopy.

use object::read::archive::ArchiveFile;
use object::{Object, ObjectSymbol};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Symbols the application side needs besides `sys_*`: the kernel's entry
/// point, linker-defined symbols it references, instrumentation, and what
/// the kernel calls in the application (std's `runtime_entry`, `main`).
pub const ENTRY_SYMBOLS: [&str; 5] = ["_start", "__bss_start", "mcount", "runtime_entry", "main"];

/// Prefix for every renamed symbol.
const PREFIX: &str = "hermit";

/// `e_ident[EI_OSABI]`.
const EI_OSABI: usize = 7;
/// ELFOSABI_STANDALONE: what Hermit images carry.
const ELFOSABI_STANDALONE: u8 = 255;

/// What the export keeps and what it renames.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Defined global symbols that stay as they are.
    pub keep: BTreeSet<String>,
    /// Every other defined global symbol -> its new name.
    pub renames: BTreeMap<String, String>,
}

/// Whether `member` (an archive member name) is an object of the kernel
/// crate itself (Cargo names them `hermit-<hash>.hermit.<hash>-cgu.N.rcgu.o`).
fn is_kernel_member(member: &str) -> bool {
    member.starts_with("hermit-")
}

/// The exported name of a renamed symbol. Legacy-mangled Rust symbols stay
/// demangleable (`_ZN4core3fmt..` -> `_ZN6hermit4core3fmt..`, shown as
/// `hermit::core::fmt::..`); anything else gets `hermit_` in front.
pub fn renamed(symbol: &str) -> String {
    match symbol.strip_prefix("_ZN") {
        Some(rest) => format!("_ZN{}{PREFIX}{rest}", PREFIX.len()),
        None => format!("{PREFIX}_{symbol}"),
    }
}

/// Every member of an archive with its name and byte range in the file.
fn members(archive: &[u8]) -> Result<Vec<(String, u64, u64)>, String> {
    let file = ArchiveFile::parse(archive).map_err(|e| format!("not an archive: {e}"))?;
    let mut out = Vec::new();
    for member in file.members() {
        let member = member.map_err(|e| format!("bad archive member: {e}"))?;
        let name = String::from_utf8_lossy(member.name()).into_owned();
        let (offset, size) = member.file_range();
        out.push((name, offset, size));
    }
    Ok(out)
}

/// The bytes of one member.
fn member_data(archive: &[u8], offset: u64, size: u64) -> Result<&[u8], String> {
    let start = usize::try_from(offset).map_err(|_| "member offset too large")?;
    let len = usize::try_from(size).map_err(|_| "member size too large")?;
    start
        .checked_add(len)
        .and_then(|end| archive.get(start..end))
        .ok_or_else(|| format!("member at {offset:#x} runs past the end of the archive"))
}

fn is_elf(data: &[u8]) -> bool {
    data.starts_with(b"\x7fELF")
}

/// Defined global symbols of every ELF member: (member name, symbol).
fn defined_globals(archive: &[u8]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (name, offset, size) in members(archive)? {
        let data = member_data(archive, offset, size)?;
        if !is_elf(data) {
            continue; // e.g. a `lib.rmeta` member
        }
        let obj =
            object::File::parse(data).map_err(|e| format!("{name}: not an ELF object: {e}"))?;
        for sym in obj.symbols() {
            if sym.is_undefined() || !sym.is_global() {
                continue;
            }
            let sym_name = sym
                .name()
                .map_err(|e| format!("{name}: bad symbol name: {e}"))?;
            if !sym_name.is_empty() {
                out.push((name.clone(), sym_name.to_string()));
            }
        }
    }
    Ok(out)
}

/// Decides which symbols stay and what the others become.
pub fn plan(archive: &[u8]) -> Result<Plan, String> {
    let globals = defined_globals(archive)?;
    let keep: BTreeSet<String> = globals
        .iter()
        .filter(|(member, sym)| {
            (is_kernel_member(member) && sym.starts_with("sys_"))
                || ENTRY_SYMBOLS.contains(&sym.as_str())
        })
        .map(|(_, sym)| sym.clone())
        .collect();
    let renames = globals
        .into_iter()
        .filter(|(_, sym)| !keep.contains(sym))
        .map(|(_, sym)| {
            let new = renamed(&sym);
            (sym, new)
        })
        .collect();
    Ok(Plan { keep, renames })
}

/// Sets ELFOSABI_STANDALONE in every ELF member; returns how many.
pub fn set_osabi(archive: &mut [u8]) -> Result<usize, String> {
    let mut patched = 0;
    for (_, offset, size) in members(archive)? {
        let data = member_data(archive, offset, size)?;
        if is_elf(data) && data.len() > EI_OSABI {
            // member_data checked the range, so this index is in bounds.
            archive[offset as usize + EI_OSABI] = ELFOSABI_STANDALONE;
            patched += 1;
        }
    }
    Ok(patched)
}

/// What the exported archive looks like.
#[derive(Debug, PartialEq, Eq)]
pub struct Exported {
    /// ELF members (all with OSABI 255).
    pub objects: usize,
    /// Global symbols left with their own names.
    pub kept: usize,
    /// Of those, `sys_*` functions.
    pub syscalls: usize,
}

/// Checks an exported archive against the plan it was made from.
pub fn verify(archive: &[u8], plan: &Plan) -> Result<Exported, String> {
    let mut objects = 0;
    for (name, offset, size) in members(archive)? {
        let data = member_data(archive, offset, size)?;
        if is_elf(data) {
            objects += 1;
            if data.get(EI_OSABI) != Some(&ELFOSABI_STANDALONE) {
                return Err(format!("{name}: OSABI is not {ELFOSABI_STANDALONE}"));
            }
        }
    }
    let globals: BTreeSet<String> = defined_globals(archive)?
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    let new_names: BTreeSet<&String> = plan.renames.values().collect();
    for sym in &globals {
        if !plan.keep.contains(sym) && !new_names.contains(sym) {
            return Err(format!("global symbol {sym} was neither kept nor renamed"));
        }
    }
    if let Some(missing) = plan.keep.iter().find(|s| !globals.contains(*s)) {
        return Err(format!("kept symbol {missing} is gone"));
    }
    let syscalls = plan.keep.iter().filter(|s| s.starts_with("sys_")).count();
    if syscalls == 0 {
        return Err(
            "no sys_* symbol in the kernel's own objects: is this the Hermit kernel?".into(),
        );
    }
    Ok(Exported {
        objects,
        kept: plan.keep.len(),
        syscalls,
    })
}

fn export(input: &Path, output: &Path, objcopy: &Path) -> Result<(Plan, Exported), String> {
    let data = std::fs::read(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let plan = plan(&data)?;
    let list = output.with_extension("redefine-syms");
    let text: String = plan
        .renames
        .iter()
        .map(|(old, new)| format!("{old} {new}\n"))
        .collect();
    std::fs::write(&list, text).map_err(|e| format!("{}: {e}", list.display()))?;
    let status = Command::new(objcopy)
        .arg(format!("--redefine-syms={}", list.display()))
        .arg(input)
        .arg(output)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", objcopy.display()))?;
    let _ = std::fs::remove_file(&list);
    if !status.success() {
        return Err(format!("{} failed ({status})", objcopy.display()));
    }
    let mut out = std::fs::read(output).map_err(|e| format!("{}: {e}", output.display()))?;
    set_osabi(&mut out)?;
    std::fs::write(output, &out).map_err(|e| format!("{}: {e}", output.display()))?;
    let exported = verify(&out, &plan)?;
    Ok((plan, exported))
}

const USAGE: &str = "usage: clockhal-hermit-export IN.a OUT.a --objcopy PATH";

fn main() -> ExitCode {
    let mut paths = Vec::new();
    let mut objcopy = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        if a == "--objcopy" {
            objcopy = args.next().map(PathBuf::from);
        } else {
            paths.push(PathBuf::from(a));
        }
    }
    let (Some(objcopy), [input, output]) = (objcopy, paths.as_slice()) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match export(input, output, &objcopy) {
        Ok((plan, e)) => {
            println!(
                "{}: {} objects (OSABI {ELFOSABI_STANDALONE}), {} symbols kept ({} sys_*), {} renamed",
                output.display(),
                e.objects,
                e.kept,
                e.syscalls,
                plan.renames.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("clockhal-hermit-export: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::write::{Object as WriteObject, Symbol, SymbolSection};
    use object::{Architecture, BinaryFormat, Endianness, SymbolFlags, SymbolKind, SymbolScope};

    /// A relocatable x86_64 ELF with the given (name, defined) global symbols.
    fn elf(symbols: &[(&str, bool)]) -> Vec<u8> {
        let mut obj = WriteObject::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
        let text = obj.section_id(object::write::StandardSection::Text);
        obj.append_section_data(text, &[0xc3; 16], 16);
        for (i, (name, defined)) in symbols.iter().enumerate() {
            obj.add_symbol(Symbol {
                name: name.as_bytes().to_vec(),
                value: if *defined { i as u64 } else { 0 },
                size: if *defined { 1 } else { 0 },
                kind: SymbolKind::Text,
                scope: SymbolScope::Linkage,
                weak: false,
                section: if *defined {
                    SymbolSection::Section(text)
                } else {
                    SymbolSection::Undefined
                },
                flags: SymbolFlags::None,
            });
        }
        obj.write().unwrap()
    }

    /// A GNU-format archive of `(name, data)` members (names < 16 bytes).
    fn archive(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut a = b"!<arch>\n".to_vec();
        for (name, data) in members {
            let header = format!(
                "{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
                format!("{name}/"),
                0,
                0,
                0,
                644,
                data.len()
            );
            assert_eq!(header.len(), 60);
            a.extend_from_slice(header.as_bytes());
            a.extend_from_slice(data);
            if data.len() % 2 == 1 {
                a.push(b'\n');
            }
        }
        a
    }

    fn kernel_archive() -> Vec<u8> {
        archive(&[
            (
                "hermit-1.o",
                elf(&[
                    ("sys_write", true),
                    ("_start", true),
                    ("_ZN4core3fmt5write17h0123456789abcdefE", true),
                    ("runtime_entry", false),
                ]),
            ),
            ("core-2.o", elf(&[("memcpy", true), ("sys_fake", true)])),
            ("lib.rmeta", b"not an object".to_vec()),
        ])
    }

    #[test]
    fn rust_symbols_stay_demangleable_others_get_a_prefix() {
        assert_eq!(renamed("_ZN4core3fmt5writeE"), "_ZN6hermit4core3fmt5writeE");
        assert_eq!(renamed("memcpy"), "hermit_memcpy");
    }

    #[test]
    fn the_plan_keeps_the_kernels_syscalls_and_entry_symbols_only() {
        let plan = plan(&kernel_archive()).unwrap();
        let keep: Vec<_> = plan.keep.iter().map(String::as_str).collect();
        assert_eq!(keep, ["_start", "sys_write"]);
        let renames: Vec<_> = plan
            .renames
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        assert_eq!(
            renames,
            [
                (
                    "_ZN4core3fmt5write17h0123456789abcdefE",
                    "_ZN6hermit4core3fmt5write17h0123456789abcdefE"
                ),
                ("memcpy", "hermit_memcpy"),
                // sys_* outside the kernel crate's own objects is not ABI.
                ("sys_fake", "hermit_sys_fake"),
            ]
        );
        // Undefined references (what the kernel calls in the application)
        // are not touched.
        assert!(!plan.renames.contains_key("runtime_entry"));
    }

    #[test]
    fn osabi_is_set_on_every_elf_member_and_nothing_else() {
        let mut a = kernel_archive();
        let before = a.clone();
        assert_eq!(set_osabi(&mut a).unwrap(), 2);
        let changed: Vec<_> = (0..a.len()).filter(|&i| a[i] != before[i]).collect();
        assert_eq!(changed.len(), 2);
        for (name, offset, size) in members(&a).unwrap() {
            let data = member_data(&a, offset, size).unwrap();
            if is_elf(data) {
                assert_eq!(data[EI_OSABI], ELFOSABI_STANDALONE, "{name}");
            } else {
                assert_eq!(data, b"not an object");
            }
        }
    }

    #[test]
    fn verify_rejects_an_archive_that_was_not_exported() {
        let a = kernel_archive();
        let plan = plan(&a).unwrap();
        let err = verify(&a, &plan).unwrap_err();
        assert!(err.contains("OSABI"), "{err}");
        let mut patched = a.clone();
        set_osabi(&mut patched).unwrap();
        // OSABI set but nothing renamed: the runtime symbols are still global.
        let err = verify(&patched, &plan).unwrap_err();
        assert!(err.contains("neither kept nor renamed"), "{err}");
    }

    #[test]
    fn an_archive_without_kernel_syscalls_is_refused() {
        // Exported correctly, but there is no kernel ABI in it.
        let mut a = archive(&[("core-2.o", elf(&[("hermit_memcpy", true)]))]);
        set_osabi(&mut a).unwrap();
        let plan = Plan {
            keep: BTreeSet::new(),
            renames: BTreeMap::from([("memcpy".to_string(), "hermit_memcpy".to_string())]),
        };
        let err = verify(&a, &plan).unwrap_err();
        assert!(err.contains("no sys_*"), "{err}");
        assert!(members(b"garbage").is_err());
    }
}
