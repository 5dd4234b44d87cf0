//! The pause check's host side ([`clockhal_conformance::PauseHost`]): the
//! runner's plan on the command line (`clockhal.pause_ms=N`, QEMU
//! `-append`), the marker line that tells it to `stop` the VM now, and the
//! byte it sends on COM1 after `cont`.

use clockhal_boot::println;
use clockhal_conformance::PauseHost;
use core::fmt;

/// The command-line key the runner sets on rows it pauses.
pub const CMDLINE_KEY: &str = "clockhal.pause_ms=";
/// The marker line (the runner waits for it, then stops the VM).
pub const MARKER: &str = "CLOCKHAL-PAUSE ready";
/// What the runner writes to the guest's console after `cont`.
pub const RESUMED_BYTE: u8 = b'R';
/// Longest hold the kernel accepts from its command line.
const MAX_HOLD_MS: u64 = 60_000;

/// The runner on the other end of COM1.
pub struct SerialHost {
    /// The planned hold, or why there is none.
    plan: Result<u64, &'static str>,
}

impl SerialHost {
    /// The plan `cmdline` states.
    pub fn from_cmdline(cmdline: &str) -> SerialHost {
        let value = cmdline
            .split_ascii_whitespace()
            .find_map(|w| w.strip_prefix(CMDLINE_KEY));
        let plan = match value.map(str::parse::<u64>) {
            None => Err("no pause planned here (no clockhal.pause_ms= on the kernel command line: the runner pauses only its QMP rows)"),
            Some(Ok(ms)) if (1..=MAX_HOLD_MS).contains(&ms) => Ok(ms),
            Some(_) => Err("clockhal.pause_ms= is not a hold of 1..=60000 ms"),
        };
        SerialHost { plan }
    }
}

impl PauseHost for SerialHost {
    fn planned_hold_ns(&self, why: &mut dyn fmt::Write) -> Option<u64> {
        match self.plan {
            Ok(ms) => Some(ms * 1_000_000),
            Err(e) => {
                let _ = why.write_str(e);
                None
            }
        }
    }

    fn ready(&self) {
        // Nothing sent before the marker counts as the runner's answer.
        while clockhal_boot::serial::try_read_byte().is_some() {}
        println!("{MARKER}");
    }

    fn resumed(&self) -> bool {
        core::iter::from_fn(clockhal_boot::serial::try_read_byte).any(|b| b == RESUMED_BYTE)
    }
}
