//! The devicetree Hermit 0.11 reads on an FDT platform:
//!
//! - `/memory@…` nodes: its RAM (it uses RAM above its own image only);
//! - `/hermit,rsdp`: the ACPI RSDP (without it Hermit scans the EBDA and
//!   panics on pages our identity map already maps);
//! - `/chosen/bootargs`: its command line, where `env=KEY=VALUE` sets an
//!   environment variable of the application and `--` starts the
//!   application's arguments.
//!
//! After writing, the blob is parsed back with the `fdt` crate, the parser
//! Hermit itself uses, and each of these facts is checked.

use crate::fdt::{FdtWriter, Full};
use core::ops::Range;
use fdt::Fdt;

/// What goes into the devicetree.
pub struct Contents<'a> {
    /// RAM ranges.
    pub memory: &'a [Range<u64>],
    /// Physical address of the RSDP.
    pub rsdp: u64,
    /// Hermit's command line.
    pub bootargs: &'a str,
}

/// Length of the ACPI 2.0 RSDP structure (what `/hermit,rsdp`'s reg spans).
const RSDP_LEN: u64 = 36;

/// Why the devicetree could not be built.
#[derive(Clone, Copy, Debug)]
pub enum DtError {
    /// The buffer is too small.
    Full,
    /// Reading it back failed or gave something else (what).
    Check(&'static str),
}

impl From<Full> for DtError {
    fn from(_: Full) -> Self {
        DtError::Full
    }
}

impl core::fmt::Display for DtError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DtError::Full => f.write_str("devicetree buffer too small"),
            DtError::Check(what) => write!(f, "devicetree read back wrong: {what}"),
        }
    }
}

/// Writes the devicetree into `buf` (8-byte aligned), checks it, and
/// returns it.
pub fn build<'b>(buf: &'b mut [u8], c: &Contents<'_>) -> Result<&'b [u8], DtError> {
    let mut w = FdtWriter::new(buf);
    w.begin_node("")?;
    w.prop_u32("#address-cells", 2)?;
    w.prop_u32("#size-cells", 2)?;
    w.prop_str("compatible", "clockhal,pvh-loader")?;
    w.begin_node("chosen")?;
    w.prop_str("bootargs", c.bootargs)?;
    w.end_node()?;
    for r in c.memory {
        w.begin_node_at("memory", r.start)?;
        w.prop_str("device_type", "memory")?;
        w.prop_reg(r.start, r.end - r.start)?;
        w.end_node()?;
    }
    w.begin_node("hermit,rsdp")?;
    w.prop_reg(c.rsdp, RSDP_LEN)?;
    w.end_node()?;
    w.end_node()?;
    let blob = w.finish()?;
    check(blob, c)?;
    Ok(blob)
}

/// Reads `blob` back the way Hermit 0.11 does.
fn check(blob: &[u8], c: &Contents<'_>) -> Result<(), DtError> {
    let fdt = Fdt::new(blob).map_err(|_| DtError::Check("not a devicetree"))?;
    if fdt.chosen().bootargs() != Some(c.bootargs) {
        return Err(DtError::Check("/chosen/bootargs"));
    }
    let rsdp = fdt
        .find_node("/hermit,rsdp")
        .and_then(|n| n.reg()?.next())
        .ok_or(DtError::Check("/hermit,rsdp has no reg"))?;
    if rsdp.starting_address as u64 != c.rsdp {
        return Err(DtError::Check("/hermit,rsdp address"));
    }
    let mut written = c.memory.iter();
    for node in fdt.find_all_nodes("/memory") {
        let reg = node
            .reg()
            .and_then(|mut r| r.next())
            .ok_or(DtError::Check("memory node without reg"))?;
        let expected = written.next().ok_or(DtError::Check("extra memory node"))?;
        if reg.starting_address as u64 != expected.start
            || reg.size.map(|s| s as u64) != Some(expected.end - expected.start)
        {
            return Err(DtError::Check("memory node reg"));
        }
    }
    if written.next().is_some() {
        return Err(DtError::Check("memory node missing"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(8))]
    struct Buf([u8; 4096]);

    const RAM: [Range<u64>; 2] = [0..0x9_fc00, 0x10_0000..0x1000_0000];

    fn contents() -> Contents<'static> {
        Contents {
            memory: &RAM,
            rsdp: 0xf_59e0,
            bootargs: "env=CLOCKHAL_RSDP=0xf59e0 -- arg",
        }
    }

    #[test]
    fn hermits_parser_reads_back_what_was_written() {
        let mut buf = Buf([0; 4096]);
        let blob = build(&mut buf.0, &contents()).unwrap();
        let fdt = Fdt::new(blob).unwrap();
        assert_eq!(fdt.chosen().bootargs(), Some(contents().bootargs));
        let rsdp = fdt
            .find_node("/hermit,rsdp")
            .unwrap()
            .reg()
            .unwrap()
            .next()
            .unwrap();
        assert_eq!(
            (rsdp.starting_address as u64, rsdp.size),
            (0xf_59e0, Some(36))
        );
        let memory: std::vec::Vec<_> = fdt
            .find_all_nodes("/memory")
            .map(|n| {
                let r = n.reg().unwrap().next().unwrap();
                (n.name, r.starting_address as u64, r.size.unwrap() as u64)
            })
            .collect();
        assert_eq!(
            memory,
            [
                ("memory@0", 0, 0x9_fc00),
                ("memory@100000", 0x10_0000, 0xff0_0000)
            ]
        );
        assert_eq!(fdt.root().compatible().first(), "clockhal,pvh-loader");
    }

    #[test]
    fn a_blob_that_says_something_else_is_refused() {
        let mut buf = Buf([0; 4096]);
        let blob = build(&mut buf.0, &contents()).unwrap();
        let other = Contents {
            rsdp: 0xe_0000,
            ..contents()
        };
        assert!(matches!(
            check(blob, &other),
            Err(DtError::Check("/hermit,rsdp address"))
        ));
        let fewer = Contents {
            memory: &RAM[..1],
            ..contents()
        };
        assert!(matches!(
            check(blob, &fewer),
            Err(DtError::Check("extra memory node"))
        ));
        assert!(matches!(
            check(&blob[..20], &contents()),
            Err(DtError::Check(_))
        ));
        let mut small = Buf([0; 4096]);
        assert!(matches!(
            build(&mut small.0[..100], &contents()),
            Err(DtError::Full)
        ));
    }
}
