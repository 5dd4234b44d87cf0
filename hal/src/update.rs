//! Judging a hypervisor's new clock parameters before any reading uses them.
//!
//! A paravirtual clock (kvmclock, the Hyper-V reference page) is the TSC
//! under parameters the host rewrites at any time. Every rewrite is
//! untrusted input: it is accepted only if it is *plausible* (its rate
//! lies within [`UpdateBounds::rate_range`] of the rate seen at probe time,
//! which covers a live migration to a host with another TSC rate) and
//! *continuous* with the parameters it replaces (the time the old
//! parameters give at this instant versus the time the new ones give).
//!
//! | the new parameters, at this instant | verdict |
//! |---|---|
//! | rate out of range, zero, or no map at all | [`UpdateVerdict::Reject`]: keep reading with the old parameters |
//! | up to `max_backward` behind the old ones (a host correction) | [`UpdateVerdict::Accept`]: the floor holds time until it catches up |
//! | up to `max_forward` ahead (migration downtime, a host clock step) | [`UpdateVerdict::Accept`]: time jumps forward, as it really did |
//! | further behind or ahead (garbage, years in the future, a restore the OS did not announce) | [`UpdateVerdict::Reanchor`]: keep the new rate, continue from the old timeline |
//!
//! So a single absurd update can neither move time nor stop it; a run of
//! them is counted by the caller, and the facade's watchdog demotes a
//! source that keeps producing them.

use crate::{MapSlot, TscMap};
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What a rewrite of the parameters may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct UpdateBounds {
    /// The new rate may be at most this many times faster or slower than
    /// the probe-time rate (default 4: migrations between hosts with
    /// different TSC rates change it by tens of percent).
    pub rate_range: u64,
    /// Largest forward step accepted as real (default 60 s: migration
    /// downtime and host clock steps are seconds).
    pub max_forward_ns: u64,
    /// Largest backward step accepted (default 1 ms: host corrections are
    /// microseconds); time is then held, never stepped back.
    pub max_backward_ns: u64,
}

impl Default for UpdateBounds {
    fn default() -> Self {
        UpdateBounds::new()
    }
}

impl UpdateBounds {
    /// The defaults (see the fields).
    /// Interrupt-safe: yes.
    pub const fn new() -> UpdateBounds {
        UpdateBounds {
            rate_range: 4,
            max_forward_ns: 60_000_000_000,
            max_backward_ns: 1_000_000,
        }
    }
}

/// Why new parameters were not used as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum UpdateFault {
    /// No valid map (multiplier 0, shift out of range, scale 0).
    Invalid,
    /// The rate is outside `rate_range` of the probe-time rate.
    RateOutOfRange {
        /// The new rate relative to the probe-time rate, ppm (saturated).
        ppm: i64,
    },
    /// The new parameters disagree with the old ones by more than the
    /// bounds at this instant (positive: ahead).
    Discontinuous {
        /// New minus old, ns (saturated).
        step_ns: i64,
    },
}

/// What to do with new parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum UpdateVerdict {
    /// Use `map` as it is.
    Accept(TscMap),
    /// Use `map`: the new rate, shifted onto the old timeline; the fault
    /// says what was wrong with the offset.
    Reanchor(TscMap, UpdateFault),
    /// Do not use the new parameters at all.
    Reject(UpdateFault),
}

impl UpdateVerdict {
    /// The map to read with, if any.
    /// Interrupt-safe: yes.
    pub const fn map(&self) -> Option<TscMap> {
        match self {
            UpdateVerdict::Accept(m) | UpdateVerdict::Reanchor(m, _) => Some(*m),
            UpdateVerdict::Reject(_) => None,
        }
    }

    /// The fault, if the parameters were not accepted as they are.
    /// Interrupt-safe: yes.
    pub const fn fault(&self) -> Option<UpdateFault> {
        match self {
            UpdateVerdict::Accept(_) => None,
            UpdateVerdict::Reanchor(_, f) | UpdateVerdict::Reject(f) => Some(*f),
        }
    }
}

/// A paravirtual clock's judge of its host's updates (kvmclock, the
/// Hyper-V page): the probe-time map and bounds [`judge_update`] needs, the
/// last parameters any CPU accepted (per epoch: a CPU's first update is
/// judged against them where the host promises one timeline), and the
/// counts of rejected and re-anchored updates.
///
/// ```
/// use clockhal_core::{Frequency, Scale, TscMap, UpdateBounds, UpdateFault, UpdateJudge};
/// let s = Scale::new(Frequency::from_hz(1_000_000_000).unwrap());
/// let probe = TscMap::through(&s, 0, 0);
/// let judge = UpdateJudge::new(probe, UpdateBounds::new(), 7, 2);
/// assert_eq!(judge.last_accepted(2), Some(probe));
/// // A multiplier of 0 on a CPU with no earlier map: nothing to read with.
/// assert_eq!(judge.judge(None, None, 5_000, 9, 2), Err(UpdateFault::Invalid));
/// // With one, the old map stays; the rejection is counted.
/// assert_eq!(judge.judge(Some(probe), None, 5_000, 9, 2), Ok(probe));
/// assert_eq!((judge.rejected(), judge.reanchored()), (2, 0));
/// ```
#[derive(Debug)]
pub struct UpdateJudge {
    probe: TscMap,
    bounds: UpdateBounds,
    accepted: MapSlot,
    rejected: AtomicU64,
    reanchored: AtomicU64,
}

impl UpdateJudge {
    /// A judge whose first accepted parameters are the probe's (`probe`,
    /// for the host's token `tag`, in `epoch`).
    /// Interrupt-safe: yes.
    pub fn new(probe: TscMap, bounds: UpdateBounds, tag: u32, epoch: u32) -> UpdateJudge {
        let accepted = MapSlot::new();
        accepted.store_map(tag, epoch, probe);
        UpdateJudge {
            probe,
            bounds,
            accepted,
            rejected: AtomicU64::new(0),
            reanchored: AtomicU64::new(0),
        }
    }

    /// The map some CPU accepted last in `epoch` (none after the owner
    /// moved to a new epoch, e.g. a resume: the restored host's first
    /// parameters are then judged for plausibility alone).
    /// Interrupt-safe: yes.
    pub fn last_accepted(&self, epoch: u32) -> Option<TscMap> {
        self.accepted.map_of_epoch(epoch)
    }

    /// The map accepted last in `epoch` if it was accepted for the host's
    /// token `tag`: for one set of parameters that every CPU reads (the
    /// Hyper-V page), an update another CPU judged already is taken as it
    /// was judged, not judged again against this CPU's older map.
    /// Interrupt-safe: yes.
    pub fn accepted_for(&self, tag: u32, epoch: u32) -> Option<TscMap> {
        match self.accepted.tagged_map_of_epoch(epoch) {
            Some((t, m)) if t == tag => Some(m),
            _ => None,
        }
    }

    /// Judges `new` (`None`: the parameters give no map) at TSC `at`
    /// against `last`, the map it replaces. An accepted or re-anchored map
    /// is recorded as the last accepted one (for `tag`, in `epoch`) and
    /// returned; a rejected update leaves `last` in use, or is the fault
    /// when there is no `last`. Rejections and re-anchorings are counted.
    ///
    /// Interrupt-safe: yes (lock-free).
    pub fn judge(
        &self,
        last: Option<TscMap>,
        new: Option<TscMap>,
        at: u64,
        tag: u32,
        epoch: u32,
    ) -> Result<TscMap, UpdateFault> {
        self.judge_after(last, None, new, at, tag, epoch)
    }

    /// [`judge`](Self::judge), where `returned` is the highest value
    /// readers were given from the parameters being replaced (in the
    /// source's nanoseconds; `None`: unknown): a step back is measured
    /// against it, not against `last`'s extrapolation to `at` that nobody
    /// read (see [`judge_update_after`]).
    ///
    /// Interrupt-safe: yes (lock-free).
    pub fn judge_after(
        &self,
        last: Option<TscMap>,
        returned: Option<u64>,
        new: Option<TscMap>,
        at: u64,
        tag: u32,
        epoch: u32,
    ) -> Result<TscMap, UpdateFault> {
        let verdict =
            judge_update_after(last.as_ref(), returned, new, at, &self.probe, &self.bounds);
        let map = match verdict {
            UpdateVerdict::Accept(m) => m,
            UpdateVerdict::Reanchor(m, _) => {
                self.reanchored.fetch_add(1, Relaxed);
                m
            }
            UpdateVerdict::Reject(f) => {
                self.rejected.fetch_add(1, Relaxed);
                return last.ok_or(f);
            }
        };
        self.accepted.store_map(tag, epoch, map);
        Ok(map)
    }

    /// Updates rejected so far.
    /// Interrupt-safe: yes.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Relaxed)
    }

    /// Updates re-anchored so far (discontinuous beyond the bounds).
    /// Interrupt-safe: yes.
    pub fn reanchored(&self) -> u64 {
        self.reanchored.load(Relaxed)
    }
}

/// Judges `new` (already decoded, `None` if the parameters give no map)
/// at TSC value `tsc`, against the map it replaces (`old`, if any) and the
/// probe-time rate `probe` (see the module docs).
///
/// ```
/// use clockhal_core::{judge_update, Frequency, Scale, TscMap, UpdateBounds, UpdateFault, UpdateVerdict};
/// let s = Scale::new(Frequency::from_hz(1_000_000_000).unwrap());
/// let old = TscMap::through(&s, 0, 0);
/// let b = UpdateBounds::new();
/// // A host that publishes "100 years later" at TSC 5000.
/// let garbage = TscMap::through(&s, 5_000, 3_155_760_000_000_000_000);
/// match judge_update(Some(&old), Some(garbage), 5_000, &old, &b) {
///     UpdateVerdict::Reanchor(m, UpdateFault::Discontinuous { .. }) => assert_eq!(m.apply(6_000), 6_000),
///     v => panic!("{v:?}"),
/// }
/// // A 3 us correction backwards is accepted (the reader's floor holds).
/// let back = TscMap::through(&s, 5_000, 2_000);
/// assert_eq!(judge_update(Some(&old), Some(back), 5_000, &old, &b), UpdateVerdict::Accept(back));
/// ```
///
/// Interrupt-safe: yes (pure).
pub fn judge_update(
    old: Option<&TscMap>,
    new: Option<TscMap>,
    tsc: u64,
    probe: &TscMap,
    bounds: &UpdateBounds,
) -> UpdateVerdict {
    judge_update_after(old, None, new, tsc, probe, bounds)
}

/// [`judge_update`], knowing `returned`: the highest value readers were
/// given from the parameters `old` (source nanoseconds; `None`: unknown,
/// then `old`'s extrapolation to `tsc` stands for it).
///
/// An update is a step back only against what was *returned*: a host that
/// stopped the guest and restores its clock where it stopped (QEMU's
/// `stop`/`cont`, `savevm`/`loadvm`: `KVM_GET_CLOCK` at stop,
/// `KVM_SET_CLOCK` at cont) publishes parameters behind `old`'s
/// extrapolation by the pause, but no reader saw that extrapolation: the
/// update is continuous with what readers saw, and accepted. A step ahead
/// is still measured against the extrapolation (the time the old
/// parameters say passed).
///
/// ```
/// use clockhal_core::{judge_update_after, Frequency, Scale, TscMap, UpdateBounds, UpdateVerdict};
/// let s = Scale::new(Frequency::from_hz(1_000_000_000).unwrap());
/// let old = TscMap::through(&s, 0, 0);
/// let b = UpdateBounds::new();
/// // Readers saw up to 1 s; the guest was stopped for 5 s and the host
/// // restored its clock at 1 s.
/// let cont = TscMap::through(&s, 6_000_000_000, 1_000_000_000);
/// let v = judge_update_after(Some(&old), Some(1_000_000_000), Some(cont), 6_000_000_000, &old, &b);
/// assert_eq!(v, UpdateVerdict::Accept(cont));
/// // Without knowing what was returned it looks 5 s back.
/// let v = judge_update_after(Some(&old), None, Some(cont), 6_000_000_000, &old, &b);
/// assert!(matches!(v, UpdateVerdict::Reanchor(..)));
/// ```
///
/// Interrupt-safe: yes (pure).
pub fn judge_update_after(
    old: Option<&TscMap>,
    returned: Option<u64>,
    new: Option<TscMap>,
    tsc: u64,
    probe: &TscMap,
    bounds: &UpdateBounds,
) -> UpdateVerdict {
    let Some(new) = new.filter(|m| !m.is_flat()) else {
        return UpdateVerdict::Reject(UpdateFault::Invalid);
    };
    if !rate_in_range(&new, probe, bounds.rate_range) {
        let ppm = new.slope_ppm_from(probe).unwrap_or(i64::MAX);
        return UpdateVerdict::Reject(UpdateFault::RateOutOfRange { ppm });
    }
    let Some(old) = old else {
        return UpdateVerdict::Accept(new);
    };
    let (was, now) = (old.apply(tsc), new.apply(tsc));
    // Back only from what readers may have seen: the lower of the
    // extrapolation and the highest value returned.
    let seen = returned.map_or(was, |r| r.min(was));
    let step = if now >= was {
        now as i128 - was as i128
    } else {
        (now as i128 - seen as i128).min(0)
    };
    let ok = if step >= 0 {
        step as u128 <= bounds.max_forward_ns as u128
    } else {
        step.unsigned_abs() <= bounds.max_backward_ns as u128
    };
    if ok {
        return UpdateVerdict::Accept(new);
    }
    let step_ns = step.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    UpdateVerdict::Reanchor(
        new.rebased(tsc, was),
        UpdateFault::Discontinuous { step_ns },
    )
}

/// Whether `map`'s slope is within a factor `range` of `probe`'s.
fn rate_in_range(map: &TscMap, probe: &TscMap, range: u64) -> bool {
    let (a, b) = (map.slope_q64(), probe.slope_q64());
    let r = range.max(1) as u128;
    // a / b within [1/r, r], without overflow (slopes are below 2^96).
    a.saturating_mul(r) >= b && b.saturating_mul(r) >= a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Frequency, Scale};

    fn map(hz: u64, tsc0: u64, ns0: u64) -> TscMap {
        TscMap::through(&Scale::new(Frequency::from_hz(hz).unwrap()), tsc0, ns0)
    }

    #[test]
    fn every_row_of_the_table() {
        let b = UpdateBounds::new();
        let probe = map(2_000_000_000, 0, 0);
        let old = probe;
        let t = 2_000_000_000; // 1 s
                               // Legit migration: 30% faster TSC, continuous: accepted.
        let migrated = map(2_600_000_000, t, 1_000_000_000);
        assert_eq!(
            judge_update(Some(&old), Some(migrated), t, &probe, &b),
            UpdateVerdict::Accept(migrated)
        );
        // 2 s of downtime ahead: accepted.
        let ahead = map(2_000_000_000, t, 3_000_000_000);
        assert_eq!(
            judge_update(Some(&old), Some(ahead), t, &probe, &b),
            UpdateVerdict::Accept(ahead)
        );
        // 10 minutes ahead: reanchored on the old timeline.
        let far = map(2_000_000_000, t, 601_000_000_000);
        let v = judge_update(Some(&old), Some(far), t, &probe, &b);
        assert_eq!(
            v.fault(),
            Some(UpdateFault::Discontinuous {
                step_ns: 600_000_000_000
            })
        );
        assert_eq!(v.map().unwrap().apply(t), 1_000_000_000);
        // 5 ms behind: reanchored (time neither goes back nor freezes 5 ms).
        let behind = map(2_000_000_000, t, 995_000_000);
        assert!(matches!(
            judge_update(Some(&old), Some(behind), t, &probe, &b),
            UpdateVerdict::Reanchor(..)
        ));
        // 10x the rate: rejected.
        let fast = map(20_000_000_000, t, 1_000_000_000);
        assert!(matches!(
            judge_update(Some(&old), Some(fast), t, &probe, &b),
            UpdateVerdict::Reject(UpdateFault::RateOutOfRange { .. })
        ));
        // No map, or a flat one: rejected.
        assert_eq!(
            judge_update(Some(&old), None, t, &probe, &b),
            UpdateVerdict::Reject(UpdateFault::Invalid)
        );
        let flat = TscMap::from_words(0, 0, 5);
        assert_eq!(
            judge_update(Some(&old), Some(flat), t, &probe, &b),
            UpdateVerdict::Reject(UpdateFault::Invalid)
        );
        // No previous map: any plausible one is taken as it is.
        assert_eq!(
            judge_update(None, Some(far), t, &probe, &b),
            UpdateVerdict::Accept(far)
        );
    }

    #[test]
    fn a_step_back_counts_only_against_what_was_returned() {
        // Issue 26: QEMU stop/cont restores kvmclock where it stopped.
        let b = UpdateBounds::new();
        let probe = map(2_000_000_000, 0, 0);
        let s = 1_000_000_000u64; // ns
        let t = |ns: u64| ns * 2; // TSC ticks
                                  // Readers saw up to 1 s; 5 s of pause; the host restores 1 s.
        let cont = map(2_000_000_000, t(6 * s), s);
        for returned in [s, s - 500_000, s / 2] {
            assert_eq!(
                judge_update_after(
                    Some(&probe),
                    Some(returned),
                    Some(cont),
                    t(6 * s),
                    &probe,
                    &b
                ),
                UpdateVerdict::Accept(cont),
                "returned {returned}"
            );
        }
        // Behind what was returned by more than max_backward: still a step.
        let v = judge_update_after(
            Some(&probe),
            Some(s + 2_000_000),
            Some(cont),
            t(6 * s),
            &probe,
            &b,
        );
        assert_eq!(
            v.fault(),
            Some(UpdateFault::Discontinuous {
                step_ns: -2_000_000
            })
        );
        // A returned value above the extrapolation (another CPU's) does not
        // make a continuous update a step back.
        let same = map(2_000_000_000, t(6 * s), 6 * s);
        assert_eq!(
            judge_update_after(Some(&probe), Some(9 * s), Some(same), t(6 * s), &probe, &b),
            UpdateVerdict::Accept(same)
        );
        // Ahead is still measured against the extrapolation.
        let far = map(2_000_000_000, t(6 * s), 6 * s + 61 * s);
        assert!(matches!(
            judge_update_after(Some(&probe), Some(s), Some(far), t(6 * s), &probe, &b),
            UpdateVerdict::Reanchor(..)
        ));
    }

    #[test]
    fn the_issue_s_hostile_pvclock_update_is_rejected() {
        // mul = u32::MAX, shift = 32 after a 2.3 GHz probe.
        let probe = TscMap::pvclock(3_734_754_170, -1, 0, 0).unwrap();
        let hostile = TscMap::pvclock(u32::MAX, 32, 1_000, 1_000);
        let v = judge_update(Some(&probe), hostile, 1_000, &probe, &UpdateBounds::new());
        assert!(
            matches!(v, UpdateVerdict::Reject(UpdateFault::RateOutOfRange { .. })),
            "{v:?}"
        );
    }
}
