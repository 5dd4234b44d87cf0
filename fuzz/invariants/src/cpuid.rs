//! The CPUID decoders and `Tsc::probe` over an arbitrary CPUID table
//! (clockhal-sim's `SimConfig` table, optionally with QEMU-TCG-style garbage
//! for leaves outside it).
//!
//! - **Never a leaf above a range's maximum**: a decoder reads leaf 0, 1
//!   and 0x80000000 freely; another basic leaf only up to CPUID.0:EAX, an
//!   extended one only up to CPUID.80000000:EAX; hypervisor leaves only when
//!   CPUID.1:ECX bit 31 says a hypervisor is present, and within a range only
//!   the base (the signature scan) and leaves up to the range's maximum
//!   (its base's EAX capped at base + 0xFF; base + 1 when EAX is below the
//!   base, old KVM).
//! - **Results match a model** of the table: vendor, hypervisor bit,
//!   RDTSCP, invariant TSC, leaf 0x15, leaf 0x16, the KVM and Hyper-V
//!   ranges and features, the timing leaf, the first hypervisor range.
//! - **`Tsc::probe` rates are in range or rejected**: no TSC bit is
//!   `NoTsc`; otherwise the rate and its provenance are the model's (CPUID
//!   0x15 with a 1..=100 MHz crystal, the timing leaf of the first or KVM
//!   range, the best caller hint, CPUID 0x16, in that order, each only when
//!   the rate lies in 100 MHz ..= 10 GHz), or `RateUnknown` when none is.

use arbitrary::Arbitrary;
use clockhal_core::{ClockSource, Frequency};
use clockhal_sim::{regs, CpuidMissing, SimConfig, SimMachine};
use clockhal_tsc::{RateProvenance, Tsc, TscError, TscOptions};
use clockhal_x86::cpuid::{self, HypervisorRange, Vendor, HYPERV_SIGNATURE, KVM_SIGNATURE};
use clockhal_x86::CpuidResult;
use std::collections::BTreeSet;
use std::vec::Vec;

#[derive(Arbitrary, Debug)]
enum Leaf {
    Basic(u8),
    Extended(u8),
    Hypervisor { base: u8, offset: u8 },
    Raw(u32),
}

#[derive(Arbitrary, Debug)]
struct Entry {
    leaf: Leaf,
    regs: [u32; 4],
    /// Bits 0-1: signature at a range base (1 KVM, 2 Hyper-V); bit 2:
    /// "Hv#1" in EAX.
    shape: u8,
}

#[derive(Arbitrary, Debug)]
struct Case {
    /// Start from clockhal-sim's default CPU (else an empty table).
    defaults: bool,
    garbage: bool,
    entries: Vec<Entry>,
    hints: Vec<(u64, u64, u8)>,
}

const HINT_PROVENANCES: [RateProvenance; 4] = [
    RateProvenance::HypervMsr,
    RateProvenance::Pvclock,
    RateProvenance::OsSupplied,
    RateProvenance::BaseFrequencyHint,
];

const PLAUSIBLE_HZ: std::ops::RangeInclusive<u64> = 100_000_000..=10_000_000_000;

fn plausible(f: Frequency) -> Option<Frequency> {
    PLAUSIBLE_HZ.contains(&f.hz_rounded()).then_some(f)
}

fn machine(case: &Case) -> SimMachine {
    let mut c = SimConfig::cpu(2_000_000_000);
    if !case.defaults {
        c.cpuid.clear();
    }
    c.cpuid_missing = if case.garbage {
        CpuidMissing::Garbage
    } else {
        CpuidMissing::Zero
    };
    let word = |s: &[u8; 12], i: usize| u32::from_le_bytes(s[i..i + 4].try_into().unwrap());
    for e in case.entries.iter().take(64) {
        let leaf = match e.leaf {
            Leaf::Basic(l) => l as u32 % 0x20,
            Leaf::Extended(l) => 0x8000_0000 + l as u32 % 0x10,
            Leaf::Hypervisor { base, offset } => 0x4000_0000 + base as u32 * 0x100 + offset as u32,
            Leaf::Raw(l) => l,
        };
        let [mut a, mut b, mut c2, mut d] = e.regs;
        let sig = match e.shape & 3 {
            1 => Some(KVM_SIGNATURE),
            2 => Some(HYPERV_SIGNATURE),
            _ => None,
        };
        if let Some(s) = sig {
            (b, c2, d) = (word(s, 0), word(s, 4), word(s, 8));
        }
        if e.shape & 4 != 0 {
            a = 0x3123_7648;
        }
        c.cpuid.insert((leaf, 0), regs(a, b, c2, d));
    }
    c.build()
}

/// The table as the model reads it (`SimConfig::cpuid_value`: no access
/// is recorded).
struct Model<'a> {
    m: &'a SimMachine,
    max_basic: u32,
    max_ext: u32,
    hypervisor: bool,
}

impl Model<'_> {
    fn new(m: &SimMachine) -> Model<'_> {
        let c = m.config();
        Model {
            m,
            max_basic: c.cpuid_value(0, 0).eax,
            max_ext: c.cpuid_value(0x8000_0000, 0).eax,
            hypervisor: c.cpuid_value(1, 0).ecx & (1 << 31) != 0,
        }
    }

    fn leaf(&self, leaf: u32) -> CpuidResult {
        self.m.config().cpuid_value(leaf, 0)
    }

    fn basic(&self, leaf: u32) -> Option<CpuidResult> {
        (leaf <= self.max_basic).then(|| self.leaf(leaf))
    }

    fn extended(&self, leaf: u32) -> Option<CpuidResult> {
        (leaf <= self.max_ext).then(|| self.leaf(leaf))
    }

    /// The maximum leaf of the range at `base`, by the documented rule.
    fn range_max(&self, base: u32) -> u32 {
        let eax = self.leaf(base).eax;
        if eax < base {
            base + 1
        } else {
            eax.min(base + 0xFF)
        }
    }

    fn allowed(&self, leaf: u32) -> bool {
        match leaf {
            0 | 1 | 0x8000_0000 => true,
            0x4000_0000..=0x4FFF_FFFF => {
                let base = leaf & !0xFF;
                self.hypervisor
                    && base <= 0x4000_FF00
                    && (leaf == base || leaf <= self.range_max(base))
            }
            0x8000_0001..=0xFFFF_FFFF => leaf <= self.max_ext,
            _ => leaf <= self.max_basic,
        }
    }

    /// Runs `f` and checks every leaf it read.
    fn reads<R>(&self, what: &str, f: impl FnOnce() -> R) -> R {
        self.m.take_cpuid_reads();
        let r = f();
        let reads: BTreeSet<(u32, u32)> = self.m.take_cpuid_reads();
        for &(leaf, sub) in &reads {
            assert!(
                self.allowed(leaf),
                "{what} read leaf {leaf:#x}.{sub} (max basic {:#x}, extended {:#x}, hypervisor {})",
                self.max_basic,
                self.max_ext,
                self.hypervisor
            );
        }
        r
    }

    fn vendor(&self) -> Vendor {
        let r = self.leaf(0);
        let mut s = [0u8; 12];
        for (i, w) in [r.ebx, r.edx, r.ecx].into_iter().enumerate() {
            s[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        match &s {
            b"GenuineIntel" => Vendor::Intel,
            b"AuthenticAMD" => Vendor::Amd,
            b"HygonGenuine" => Vendor::Hygon,
            _ => Vendor::Other,
        }
    }

    /// The first range base with `sig`. Only table entries can hold a
    /// signature (a missing leaf reads as zeros, or as garbage that would
    /// have to equal 12 chosen bytes), so only those are scanned.
    fn find(&self, sig: &[u8; 12]) -> Option<HypervisorRange> {
        if !self.hypervisor {
            return None;
        }
        let table = &self.m.config().cpuid;
        let bases = table
            .range((0x4000_0000, 0)..=(0x4000_FF00, 0))
            .map(|(&(leaf, _), _)| leaf)
            .filter(|leaf| leaf & 0xFF == 0);
        bases.into_iter().find_map(|base| {
            let r = self.leaf(base);
            let mut s = [0u8; 12];
            for (i, w) in [r.ebx, r.ecx, r.edx].into_iter().enumerate() {
                s[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
            }
            (&s == sig).then(|| HypervisorRange {
                base,
                max_leaf: self.range_max(base),
            })
        })
    }

    fn range_leaf(&self, r: &HypervisorRange, offset: u32) -> Option<CpuidResult> {
        (r.base + offset <= r.max_leaf).then(|| self.leaf(r.base + offset))
    }

    fn first_range(&self) -> Option<HypervisorRange> {
        let eax = self.leaf(0x4000_0000).eax;
        (self.hypervisor && (0x4000_0000..=0x4000_00FF).contains(&eax)).then_some(HypervisorRange {
            base: 0x4000_0000,
            max_leaf: eax,
        })
    }

    fn timing_khz(&self, r: &HypervisorRange) -> Option<u32> {
        self.range_leaf(r, 0x10).map(|l| l.eax).filter(|&k| k != 0)
    }

    fn leaf15(&self) -> Option<(u32, u32, u32)> {
        self.basic(0x15).map(|r| (r.eax, r.ebx, r.ecx))
    }

    fn base_mhz(&self) -> Option<u16> {
        self.basic(0x16).map(|r| r.eax as u16).filter(|&m| m != 0)
    }

    /// The rate `Tsc::probe` must choose without a reference clock.
    fn tsc_rate(
        &self,
        hints: &[(Frequency, RateProvenance)],
    ) -> Option<(Frequency, RateProvenance)> {
        let leaf15 = self.leaf15().and_then(|(den, num, crystal)| {
            if den == 0 || num == 0 || !(1_000_000..=100_000_000).contains(&crystal) {
                return None;
            }
            plausible(Frequency::from_ratio(crystal as u128 * num as u128, den as u128).ok()?)
        });
        if let Some(f) = leaf15 {
            return Some((f, RateProvenance::CpuidLeaf15));
        }
        let first = self.first_range();
        let kvm = self.find(KVM_SIGNATURE).filter(|r| Some(*r) != first);
        let timing = [first, kvm]
            .into_iter()
            .flatten()
            .find_map(|r| plausible(Frequency::from_hz(self.timing_khz(&r)? as u64 * 1000).ok()?));
        if let Some(f) = timing {
            return Some((f, RateProvenance::HypervisorLeaf));
        }
        let hint = HINT_PROVENANCES[..3].iter().find_map(|&p| {
            hints
                .iter()
                .find(|&&(f, q)| q == p && plausible(f).is_some())
                .copied()
        });
        if hint.is_some() {
            return hint;
        }
        let base = self.base_mhz()?;
        Some((
            plausible(Frequency::from_hz(base as u64 * 1_000_000).ok()?)?,
            RateProvenance::BaseFrequencyHint,
        ))
    }
}

/// Runs the check on `data`.
pub fn check(data: &[u8]) {
    let Some(case) = crate::decode::<Case>(data) else {
        return;
    };
    let m = machine(&case);
    let model = Model::new(&m);
    let hw = &m;

    assert_eq!(model.reads("vendor", || cpuid::vendor(hw)), model.vendor());
    assert_eq!(
        model.reads("hypervisor_present", || cpuid::hypervisor_present(hw)),
        model.hypervisor
    );
    let bit = |r: Option<CpuidResult>, b: u32| r.is_some_and(|r| r.edx & (1 << b) != 0);
    assert_eq!(
        model.reads("has_rdtscp", || cpuid::has_rdtscp(hw)),
        bit(model.extended(0x8000_0001), 27)
    );
    let invariant = bit(model.extended(0x8000_0007), 8);
    assert_eq!(
        model.reads("invariant_tsc", || cpuid::invariant_tsc(hw)),
        invariant
    );
    let leaf = model.reads("tsc_leaf", || cpuid::tsc_leaf(hw));
    assert_eq!(
        leaf.map(|l| (l.denominator, l.numerator, l.crystal_hz)),
        model.leaf15()
    );
    if let Some(l) = leaf {
        let zero = l.denominator == 0 || l.numerator == 0 || l.crystal_hz == 0;
        assert_eq!(l.tsc_hz_ratio().is_none(), zero);
    }
    assert_eq!(
        model.reads("base_mhz", || cpuid::base_mhz(hw)),
        model.base_mhz()
    );

    // `kvm` and `hyperv` are `find_hypervisor` plus their leaves (each
    // scan costs up to 256 CPUID reads, so `find_hypervisor` is not run
    // on its own).
    let kvm_range = model.find(KVM_SIGNATURE);
    let kvm = model.reads("kvm", || cpuid::kvm(hw));
    assert_eq!(kvm.map(|k| k.0), kvm_range);
    if let (Some((r, f)), Some(range)) = (kvm, kvm_range) {
        let eax = model.range_leaf(&range, 1).map_or(0, |l| l.eax);
        assert_eq!(f.bits(), eax, "{r:?}");
    }
    let hv_range = model.find(HYPERV_SIGNATURE);
    let hv = model.reads("hyperv", || cpuid::hyperv(hw));
    let hv_model = hv_range.and_then(|r| {
        (model.range_leaf(&r, 1)?.eax == 0x3123_7648)
            .then(|| model.range_leaf(&r, 3))
            .flatten()
            .map(|f| (r, f.eax, f.edx))
    });
    assert_eq!(hv.map(|(r, f)| (r, f.eax, f.edx)), hv_model);
    let first = model.reads("first_hypervisor_range", || {
        cpuid::first_hypervisor_range(hw)
    });
    assert_eq!(first, model.first_range());
    for r in [first, kvm_range, hv_range].into_iter().flatten() {
        let t = model.reads("timing_leaf", || cpuid::timing_leaf(hw, &r));
        assert_eq!(t.map(|t| t.tsc_khz), model.timing_khz(&r), "{r:?}");
    }

    let hints: Vec<(Frequency, RateProvenance)> = case
        .hints
        .iter()
        .take(8)
        .filter_map(|&(n, d, p)| {
            let f = Frequency::from_ratio(n as u128, d as u128).ok()?;
            Some((f, HINT_PROVENANCES[p as usize % HINT_PROVENANCES.len()]))
        })
        .collect();
    let opts = TscOptions {
        hints: &hints,
        ..TscOptions::new()
    };
    let probed = model.reads("Tsc::probe", || Tsc::probe(hw, &opts));
    let has_tsc = model.leaf(1).edx & (1 << 4) != 0;
    match (probed, has_tsc, model.tsc_rate(&hints)) {
        (Err(TscError::NoTsc), false, _) => {}
        (Ok(tsc), true, Some((rate, provenance))) => {
            assert!(PLAUSIBLE_HZ.contains(&tsc.frequency().hz_rounded()));
            assert_eq!((tsc.frequency(), tsc.provenance()), (rate, provenance));
            assert_eq!(tsc.invariant(), invariant);
        }
        (Err(TscError::RateUnknown { calibration: None }), true, None) => {}
        (got, has_tsc, want) => panic!(
            "Tsc::probe: {:?}, expected TSC {has_tsc} rate {want:?}",
            got.map(|t| (t.frequency(), t.provenance()))
        ),
    };
}
