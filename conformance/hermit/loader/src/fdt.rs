//! A flattened-devicetree (DTB, version 17) writer into a caller's buffer.
//!
//! Only what the loader needs: nodes, and string / u32 / `reg` properties
//! with `#address-cells = #size-cells = 2`. Layout: header, an empty memory
//! reservation map, the structure block, the strings block. Every write is
//! bounds-checked; a full buffer is an error, never a panic.

/// DTB magic.
const MAGIC: u32 = 0xd00d_feed;
const VERSION: u32 = 17;
const LAST_COMPATIBLE_VERSION: u32 = 16;
const HEADER_LEN: usize = 40;
/// One all-zero entry ends the (empty) memory reservation map.
const RESERVATION_MAP_LEN: usize = 16;
const STRUCT_OFFSET: usize = HEADER_LEN + RESERVATION_MAP_LEN;

const FDT_BEGIN_NODE: u32 = 1;
const FDT_END_NODE: u32 = 2;
const FDT_PROP: u32 = 3;
const FDT_END: u32 = 9;

/// Longest strings block (property names).
const STRINGS_MAX: usize = 256;

/// The buffer (or the strings block) is too small.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// Builds one devicetree blob.
pub struct FdtWriter<'b> {
    buf: &'b mut [u8],
    /// Length of the structure block so far.
    structs: usize,
    strings: [u8; STRINGS_MAX],
    strings_len: usize,
    depth: usize,
}

impl<'b> FdtWriter<'b> {
    /// A writer into `buf` (8-byte alignment of `buf` is the caller's job:
    /// the blob's consumers expect it).
    pub fn new(buf: &'b mut [u8]) -> FdtWriter<'b> {
        FdtWriter {
            buf,
            structs: 0,
            strings: [0; STRINGS_MAX],
            strings_len: 0,
            depth: 0,
        }
    }

    /// Appends `bytes` to the structure block, zero-padded to 4 bytes.
    fn put(&mut self, bytes: &[u8]) -> Result<(), Full> {
        let at = STRUCT_OFFSET + self.structs;
        let padded = bytes.len().next_multiple_of(4);
        let dst = self.buf.get_mut(at..at + padded).ok_or(Full)?;
        dst[..bytes.len()].copy_from_slice(bytes);
        dst[bytes.len()..].fill(0);
        self.structs += padded;
        Ok(())
    }

    fn put_u32(&mut self, v: u32) -> Result<(), Full> {
        self.put(&v.to_be_bytes())
    }

    /// Opens a node (`""` for the root).
    pub fn begin_node(&mut self, name: &str) -> Result<(), Full> {
        self.put_u32(FDT_BEGIN_NODE)?;
        self.put_name(name.as_bytes())?;
        self.depth += 1;
        Ok(())
    }

    /// Opens a node named `prefix@<addr in hex>`.
    pub fn begin_node_at(&mut self, prefix: &str, addr: u64) -> Result<(), Full> {
        let mut name = [0u8; 48];
        let p = prefix.as_bytes();
        let len = p.len() + 1;
        name.get_mut(..p.len()).ok_or(Full)?.copy_from_slice(p);
        name[p.len()] = b'@';
        let digits = hex(addr, &mut name[len..]).ok_or(Full)?;
        self.put_u32(FDT_BEGIN_NODE)?;
        self.put_name(&name[..len + digits])?;
        self.depth += 1;
        Ok(())
    }

    /// A NUL-terminated name, padded.
    fn put_name(&mut self, name: &[u8]) -> Result<(), Full> {
        let at = STRUCT_OFFSET + self.structs;
        let padded = (name.len() + 1).next_multiple_of(4);
        let dst = self.buf.get_mut(at..at + padded).ok_or(Full)?;
        dst[..name.len()].copy_from_slice(name);
        dst[name.len()..].fill(0);
        self.structs += padded;
        Ok(())
    }

    /// Closes the innermost open node.
    pub fn end_node(&mut self) -> Result<(), Full> {
        self.depth = self.depth.saturating_sub(1);
        self.put_u32(FDT_END_NODE)
    }

    /// Offset of `name` in the strings block (added if new).
    fn string_offset(&mut self, name: &str) -> Result<u32, Full> {
        let mut at = 0;
        while at < self.strings_len {
            let end = at
                + self.strings[at..self.strings_len]
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(self.strings_len - at);
            if &self.strings[at..end] == name.as_bytes() {
                return Ok(at as u32);
            }
            at = end + 1;
        }
        let start = self.strings_len;
        let dst = self
            .strings
            .get_mut(start..start + name.len() + 1)
            .ok_or(Full)?;
        dst[..name.len()].copy_from_slice(name.as_bytes());
        dst[name.len()] = 0;
        self.strings_len += name.len() + 1;
        Ok(start as u32)
    }

    fn property(&mut self, name: &str, value_len: usize) -> Result<(), Full> {
        let off = self.string_offset(name)?;
        self.put_u32(FDT_PROP)?;
        self.put_u32(u32::try_from(value_len).map_err(|_| Full)?)?;
        self.put_u32(off)
    }

    /// A string property (NUL-terminated in the blob).
    pub fn prop_str(&mut self, name: &str, value: &str) -> Result<(), Full> {
        self.property(name, value.len() + 1)?;
        self.put_name(value.as_bytes())
    }

    /// A 32-bit cell property.
    pub fn prop_u32(&mut self, name: &str, value: u32) -> Result<(), Full> {
        self.property(name, 4)?;
        self.put_u32(value)
    }

    /// `reg = <addr size>` with two cells each.
    pub fn prop_reg(&mut self, addr: u64, size: u64) -> Result<(), Full> {
        self.property("reg", 16)?;
        self.put(&addr.to_be_bytes())?;
        self.put(&size.to_be_bytes())
    }

    /// Ends the blob and writes its header; returns the blob. Every opened
    /// node must have been closed.
    pub fn finish(mut self) -> Result<&'b [u8], Full> {
        if self.depth != 0 {
            return Err(Full);
        }
        self.put_u32(FDT_END)?;
        let strings_at = STRUCT_OFFSET + self.structs;
        let total = strings_at + self.strings_len;
        self.buf
            .get_mut(strings_at..total)
            .ok_or(Full)?
            .copy_from_slice(&self.strings[..self.strings_len]);
        let header: [u32; 10] = [
            MAGIC,
            total as u32,
            STRUCT_OFFSET as u32,
            strings_at as u32,
            HEADER_LEN as u32,
            VERSION,
            LAST_COMPATIBLE_VERSION,
            0, // boot CPU id
            self.strings_len as u32,
            self.structs as u32,
        ];
        for (i, word) in header.iter().enumerate() {
            self.buf[i * 4..i * 4 + 4].copy_from_slice(&word.to_be_bytes());
        }
        self.buf[HEADER_LEN..STRUCT_OFFSET].fill(0);
        Ok(&self.buf[..total])
    }
}

/// Lower-case hex digits of `v` (no leading zeros) into `out`; their count.
fn hex(v: u64, out: &mut [u8]) -> Option<usize> {
    let digits = if v == 0 {
        1
    } else {
        (64 - v.leading_zeros() as usize).div_ceil(4)
    };
    let out = out.get_mut(..digits)?;
    for (i, d) in out.iter_mut().enumerate() {
        let nibble = (v >> ((digits - 1 - i) * 4)) & 0xf;
        *d = b"0123456789abcdef"[nibble as usize];
    }
    Some(digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_layout_follow_the_spec() {
        let mut buf = [0u8; 512];
        let mut w = FdtWriter::new(&mut buf);
        w.begin_node("").unwrap();
        w.prop_u32("#size-cells", 2).unwrap();
        w.begin_node_at("memory", 0x10_0000).unwrap();
        w.prop_str("device_type", "memory").unwrap();
        w.end_node().unwrap();
        w.end_node().unwrap();
        let blob = w.finish().unwrap();
        let be = |at: usize| u32::from_be_bytes(blob[at..at + 4].try_into().unwrap());
        assert_eq!(be(0), MAGIC);
        assert_eq!(be(4) as usize, blob.len());
        assert_eq!((be(20), be(24)), (17, 16));
        assert_eq!(be(8) as usize, STRUCT_OFFSET);
        let strings = &blob[be(12) as usize..];
        assert_eq!(strings, b"#size-cells\0device_type\0");
        // Node name with the unit address in lower-case hex.
        assert!(blob.windows(14).any(|w| w == b"memory@100000\0"));
    }

    #[test]
    fn full_buffers_and_open_nodes_are_errors() {
        let mut tiny = [0u8; 60];
        let mut w = FdtWriter::new(&mut tiny);
        assert_eq!(w.begin_node("a-name-that-does-not-fit"), Err(Full));
        let mut buf = [0u8; 256];
        let mut w = FdtWriter::new(&mut buf);
        w.begin_node("").unwrap();
        assert_eq!(w.finish().map(|_| ()), Err(Full));
    }

    #[test]
    fn hex_digits() {
        let mut out = [0u8; 16];
        assert_eq!(hex(0, &mut out), Some(1));
        assert_eq!(&out[..1], b"0");
        assert_eq!(hex(0xfed0_0000, &mut out), Some(8));
        assert_eq!(&out[..8], b"fed00000");
        assert_eq!(hex(u64::MAX, &mut out[..15]), None);
    }
}
