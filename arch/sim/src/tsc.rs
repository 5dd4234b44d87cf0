//! The simulated TSCs: one count at a rate that may change at run time,
//! plus per-CPU offsets of two kinds.
//!
//! CPU `i`'s TSC = `base_ticks + (now - base_ns) * hz / 1e9 + offset[i] +
//! adjust[i]`:
//! - `offset` is the hypervisor's per-vCPU TSC offset: the guest cannot
//!   see it (an unsynchronised host, or one CPU stepped by a fault);
//! - `adjust` is `IA32_TSC_ADJUST`: what firmware or the guest wrote to the
//!   TSC (a `wrmsr` of `IA32_TSC` or `IA32_TSC_ADJUST` moves both, as the
//!   SDM says).
//!
//! A rate change keeps every TSC continuous: the count goes on from where
//! it was, faster or slower (a live migration to a host with another TSC
//! rate and no TSC scaling).

/// The machine's TSC state (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimTsc {
    hz: u64,
    base_ns: u64,
    base_ticks: u64,
    offsets: Vec<i64>,
    adjust: Vec<i64>,
}

impl SimTsc {
    pub(crate) fn new(hz: u64, offsets: &[i64]) -> SimTsc {
        SimTsc {
            hz,
            base_ns: 0,
            base_ticks: 0,
            offsets: offsets.to_vec(),
            adjust: vec![0; offsets.len()],
        }
    }

    /// The current rate in Hz.
    pub fn hz(&self) -> u64 {
        self.hz
    }

    /// Number of CPUs.
    pub fn cpus(&self) -> usize {
        self.offsets.len()
    }

    /// The count without per-CPU offsets at machine time `now_ns`.
    fn common(&self, now_ns: u64) -> u64 {
        let elapsed = now_ns.saturating_sub(self.base_ns) as u128;
        self.base_ticks
            .wrapping_add((elapsed * self.hz as u128 / 1_000_000_000) as u64)
    }

    /// CPU `cpu`'s TSC at machine time `now_ns`.
    pub fn ticks(&self, now_ns: u64, cpu: usize) -> u64 {
        self.common(now_ns)
            .wrapping_add(self.offset(cpu) as u64)
            .wrapping_add(self.adjust(cpu) as u64)
    }

    /// CPU `cpu`'s hypervisor offset in ticks.
    pub fn offset(&self, cpu: usize) -> i64 {
        self.offsets.get(cpu).copied().unwrap_or(0)
    }

    /// CPU `cpu`'s `IA32_TSC_ADJUST`.
    pub fn adjust(&self, cpu: usize) -> i64 {
        self.adjust.get(cpu).copied().unwrap_or(0)
    }

    pub(crate) fn set_hz(&mut self, now_ns: u64, hz: u64) {
        self.base_ticks = self.common(now_ns);
        self.base_ns = now_ns;
        self.hz = hz;
    }

    pub(crate) fn set_offset(&mut self, cpu: usize, ticks: i64) {
        if let Some(o) = self.offsets.get_mut(cpu) {
            *o = ticks;
        }
    }

    pub(crate) fn set_adjust(&mut self, cpu: usize, value: i64) {
        if let Some(a) = self.adjust.get_mut(cpu) {
            *a = value;
        }
    }

    /// A `wrmsr` of `IA32_TSC`: the TSC becomes `value`, TSC_ADJUST moves
    /// by the same amount.
    pub(crate) fn write_tsc(&mut self, now_ns: u64, cpu: usize, value: u64) {
        let delta = value.wrapping_sub(self.ticks(now_ns, cpu)) as i64;
        self.set_adjust(cpu, self.adjust(cpu).wrapping_add(delta));
    }
}
