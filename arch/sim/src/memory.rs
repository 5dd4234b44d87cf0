//! Memory the guest shares with the simulated hypervisor.

use clockhal_x86::paravirt::{
    HvReferenceTscPage, KvmStealTime, PhysMapped, PvclockVcpuTimeInfo, PvclockWallClock,
};
use std::boxed::Box;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::vec::Vec;

#[derive(Clone, Copy)]
enum Shared {
    Pvclock(&'static PvclockVcpuTimeInfo),
    Wall(&'static PvclockWallClock),
    HvPage(&'static HvReferenceTscPage),
    Steal(&'static KvmStealTime),
}

/// Fake guest-physical address space: what the simulator allocated, where.
/// Allocations are leaked (tests are short-lived) so the "hypervisor" can
/// hold `&'static` references.
pub struct SharedMemory {
    next: Mutex<u64>,
    map: Mutex<BTreeMap<u64, Shared>>,
}

impl Default for SharedMemory {
    fn default() -> Self {
        SharedMemory {
            next: Mutex::new(0x1000_0000),
            map: Mutex::new(BTreeMap::new()),
        }
    }
}

impl SharedMemory {
    fn reserve(&self, bytes: u64) -> u64 {
        let mut n = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let at = *n;
        *n += bytes.div_ceil(4096).max(1) * 4096;
        at
    }

    fn insert(&self, phys: u64, s: Shared) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(phys, s);
    }

    fn get(&self, phys: u64) -> Option<Shared> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&phys)
            .copied()
    }

    /// `n` contiguous pvclock areas.
    pub fn alloc_pvclock_areas(&self, n: usize) -> PhysMapped<[PvclockVcpuTimeInfo]> {
        let v: Vec<PvclockVcpuTimeInfo> = (0..n).map(|_| PvclockVcpuTimeInfo::new()).collect();
        let areas: &'static [PvclockVcpuTimeInfo] = Box::leak(v.into_boxed_slice());
        let phys = self.reserve((n * 32) as u64);
        for (i, a) in areas.iter().enumerate() {
            self.insert(phys + 32 * i as u64, Shared::Pvclock(a));
        }
        PhysMapped::simulated(areas, phys)
    }

    /// `n` contiguous steal-time areas (64 bytes each, 64-byte aligned).
    ///
    /// Interrupt-safe: no (allocates; simulator).
    pub fn alloc_steal_areas(&self, n: usize) -> PhysMapped<[KvmStealTime]> {
        let v: Vec<KvmStealTime> = (0..n).map(|_| KvmStealTime::new()).collect();
        let areas: &'static [KvmStealTime] = Box::leak(v.into_boxed_slice());
        let phys = self.reserve((n * 64) as u64);
        for (i, a) in areas.iter().enumerate() {
            self.insert(phys + 64 * i as u64, Shared::Steal(a));
        }
        PhysMapped::simulated(areas, phys)
    }

    /// The steal-time area at `phys`, if one was allocated there.
    ///
    /// Interrupt-safe: no (takes the memory map's lock; simulator).
    pub fn steal(&self, phys: u64) -> Option<&'static KvmStealTime> {
        match self.get(phys)? {
            Shared::Steal(a) => Some(a),
            _ => None,
        }
    }

    /// A wall-clock structure.
    pub fn alloc_wall_clock(&self) -> PhysMapped<PvclockWallClock> {
        let w: &'static PvclockWallClock = Box::leak(Box::new(PvclockWallClock::new()));
        let phys = self.reserve(12);
        self.insert(phys, Shared::Wall(w));
        PhysMapped::simulated(w, phys)
    }

    /// A Hyper-V reference TSC page.
    pub fn alloc_hv_page(&self) -> PhysMapped<HvReferenceTscPage> {
        let p: &'static HvReferenceTscPage = Box::leak(Box::new(HvReferenceTscPage::new()));
        let phys = self.reserve(4096);
        self.insert(phys, Shared::HvPage(p));
        PhysMapped::simulated(p, phys)
    }

    /// The pvclock area at `phys`, if one was allocated there.
    pub fn pvclock(&self, phys: u64) -> Option<&'static PvclockVcpuTimeInfo> {
        match self.get(phys)? {
            Shared::Pvclock(a) => Some(a),
            _ => None,
        }
    }

    /// The wall-clock structure at `phys`.
    pub fn wall_clock(&self, phys: u64) -> Option<&'static PvclockWallClock> {
        match self.get(phys)? {
            Shared::Wall(w) => Some(w),
            _ => None,
        }
    }

    /// The Hyper-V page at `phys`.
    pub fn hv_page(&self, phys: u64) -> Option<&'static HvReferenceTscPage> {
        match self.get(phys)? {
            Shared::HvPage(p) => Some(p),
            _ => None,
        }
    }
}
