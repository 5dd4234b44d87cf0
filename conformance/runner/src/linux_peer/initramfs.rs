//! The peer's initramfs: an uncompressed cpio archive in the kernel's
//! "newc" format (Documentation/driver-api/early-userspace/buffer-format.rst)
//! holding `/init` and a `/dev/console` node, written here so that neither
//! cpio(1) nor root (mknod) is needed.

/// One archive member.
enum Member<'a> {
    Dir,
    /// A character device (major, minor).
    CharDev(u32, u32),
    /// An executable file.
    Exe(&'a [u8]),
}

const MAGIC: &str = "070701";
const TRAILER: &str = "TRAILER!!!";

fn pad4(out: &mut Vec<u8>) {
    while out.len() % 4 != 0 {
        out.push(0);
    }
}

fn append(out: &mut Vec<u8>, ino: u32, name: &str, m: &Member<'_>) {
    let (mode, data, rdev): (u32, &[u8], (u32, u32)) = match m {
        Member::Dir => (0o040_755, &[], (0, 0)),
        Member::CharDev(maj, min) => (0o020_600, &[], (*maj, *min)),
        Member::Exe(d) => (0o100_755, d, (0, 0)),
    };
    let nlink = if matches!(m, Member::Dir) { 2 } else { 1 };
    // ino mode uid gid nlink mtime filesize devmajor devminor rdevmajor
    // rdevminor namesize check, each as 8 hex digits.
    let fields = [
        ino,
        mode,
        0,
        0,
        nlink,
        0,
        data.len() as u32,
        0,
        0,
        rdev.0,
        rdev.1,
        name.len() as u32 + 1,
        0,
    ];
    out.extend_from_slice(MAGIC.as_bytes());
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

/// The archive: `/dev`, `/dev/console` (5:1), `/proc`, `/sys`, `/init`.
pub fn archive(init: &[u8]) -> Result<Vec<u8>, String> {
    if u32::try_from(init.len()).is_err() {
        return Err(format!("init is too large for cpio ({} bytes)", init.len()));
    }
    let members = [
        ("dev", Member::Dir),
        ("dev/console", Member::CharDev(5, 1)),
        ("proc", Member::Dir),
        ("sys", Member::Dir),
        ("init", Member::Exe(init)),
    ];
    let mut out = Vec::with_capacity(init.len() + 1024);
    for (i, (name, m)) in members.iter().enumerate() {
        append(&mut out, i as u32 + 1, name, m);
    }
    append(&mut out, 0, TRAILER, &Member::Dir);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One member as read back.
    struct Read {
        name: String,
        mode: u32,
        rdev: (u32, u32),
        data: Vec<u8>,
    }

    /// The members, read back by the format's rules.
    fn read_back(mut a: &[u8]) -> Vec<Read> {
        let total = a.len();
        let mut out = Vec::new();
        loop {
            assert_eq!((total - a.len()) % 4, 0, "header not 4-aligned");
            assert_eq!(&a[..6], MAGIC.as_bytes());
            let hex = |i: usize| {
                let s = std::str::from_utf8(&a[6 + 8 * i..14 + 8 * i]).unwrap();
                u32::from_str_radix(s, 16).unwrap()
            };
            let (mode, size, rdev, namesize) =
                (hex(1), hex(6) as usize, (hex(9), hex(10)), hex(11) as usize);
            let name_end = 110 + namesize;
            assert_eq!(a[name_end - 1], 0, "name not NUL-terminated");
            let name = String::from_utf8(a[110..name_end - 1].to_vec()).unwrap();
            let data_at = name_end.next_multiple_of(4);
            let data = a[data_at..data_at + size].to_vec();
            a = &a[(data_at + size).next_multiple_of(4)..];
            if name == TRAILER {
                assert!(a.is_empty(), "bytes after the trailer");
                return out;
            }
            out.push(Read {
                name,
                mode,
                rdev,
                data,
            });
        }
    }

    #[test]
    fn the_archive_holds_init_and_a_console() {
        let init = b"\x7fELF and then some odd-length bytes";
        let members = read_back(&archive(init).unwrap());
        let names: Vec<_> = members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["dev", "dev/console", "proc", "sys", "init"]);
        let console = &members[1];
        assert_eq!((console.mode, console.rdev), (0o020_600, (5, 1)));
        let exe = &members[4];
        assert_eq!(exe.mode, 0o100_755);
        assert_eq!(exe.data, init);
        assert_eq!(members[0].mode & 0o170_000, 0o040_000, "dev is a directory");
    }
}
