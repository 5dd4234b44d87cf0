//! KVM steal time on the clock's timeline: registered with the clock's
//! per-CPU lifecycle, judged against [`Clock::now`] (see
//! [`clockhal_kvmclock::StealTime`] for the distrust rules).

#[cfg(feature = "kvmclock")]
pub(crate) use enabled::*;

#[cfg(not(feature = "kvmclock"))]
pub(crate) use disabled::*;

#[cfg(feature = "kvmclock")]
mod enabled {
    use crate::settings::{phys_range, StealSetup};
    use crate::{Clock, CpuError};
    use clockhal_core::Duration;
    use clockhal_kvmclock::{StealError, StealTime};
    use clockhal_x86::Hardware;

    /// The clock's steal time: the backend, or why there is none.
    #[derive(Debug)]
    pub(crate) struct Steal<H: Hardware>(Result<StealTime<H>, StealError>);

    impl<H: Hardware + Clone> Steal<H> {
        /// Probes and registers the calling CPU at clock time 0.
        pub(crate) fn probe(hw: &H, setup: StealSetup) -> Steal<H> {
            let Some((areas, state)) = setup.areas else {
                return Steal(Err(StealError::NoMemory));
            };
            let (lo, hi) = phys_range(areas.phys(), areas.len(), 64);
            if setup.pvclock.is_some_and(|(plo, phi)| lo < phi && plo < hi) {
                return Steal(Err(StealError::MemoryShared));
            }
            Steal(StealTime::probe(hw.clone(), areas, state, 0))
        }

        /// The calling CPU's registration (the boot CPU's, done at build,
        /// is not an error; nor is steal time being unavailable).
        /// `now` is read only when there is steal time to register (a read
        /// of the clock on this CPU is not free of effects: it validates
        /// the CPU's parameters).
        pub(crate) fn register_this_cpu(&self, now: impl FnOnce() -> u64) -> Result<(), CpuError> {
            match &self.0 {
                Ok(s) => match s.register_this_cpu(now()) {
                    Ok(()) | Err(StealError::AlreadyRegistered) => Ok(()),
                    Err(e) => Err(CpuError::StealTime(e)),
                },
                Err(_) => Ok(()),
            }
        }

        pub(crate) fn unregister_this_cpu(&self) {
            if let Ok(s) = &self.0 {
                s.unregister_this_cpu();
            }
        }

        pub(crate) fn resume_this_cpu(&self, now: impl FnOnce() -> u64) -> Result<(), CpuError> {
            match &self.0 {
                Ok(s) => s.resume_this_cpu(now()).map_err(CpuError::StealTime),
                Err(_) => Ok(()),
            }
        }
    }

    impl<H: Hardware + Clone> Clock<H> {
        /// The steal time of the calling CPU: how long its vCPU was
        /// runnable while the host ran something else, since the CPU first
        /// registered (the boot CPU: since the clock was built; APs: since
        /// [`register_this_cpu`](Self::register_this_cpu)), carried across
        /// [`resume`](Self::resume). Never less than a value returned
        /// before on this CPU, never more than the clock time since
        /// registration: a host counter that goes back or outgrows the
        /// clock is refused and the last accepted value returned
        /// ([`StealStats`](clockhal_kvmclock::StealStats) through
        /// [`steal_time`](Self::steal_time)).
        ///
        /// `Err` says why there is none: no memory given
        /// ([`Platform::steal_time`](crate::Platform::steal_time)), not KVM,
        /// `STEAL_TIME` not offered, this CPU not registered, ...
        ///
        /// ```
        /// use clockhal::kvmclock::StealState;
        /// use clockhal::{Duration, Platform};
        /// use clockhal_sim::SimMachine;
        ///
        /// static STEAL_STATE: StealState = StealState::new();
        /// let m = SimMachine::kvm();
        /// let platform = Platform::new()
        ///     .pvclock_areas(m.alloc_pvclock_areas(1))
        ///     .steal_time_areas(m.alloc_steal_areas(1), &STEAL_STATE);
        /// let clock = clockhal::probe(&m, platform).into_clock().unwrap();
        /// let before = clock.steal_ns().unwrap();
        /// m.with_kvm(|k, _| k.set_steal_permille(100)); // the host takes 10%
        /// m.advance(50_000_000);
        /// let stolen = clock.steal_ns().unwrap() - before;
        /// assert!(stolen >= Duration::from_millis(4) && stolen <= Duration::from_millis(6));
        /// assert_eq!(clock.preempted(0), Some(false));
        /// ```
        ///
        /// Interrupt-safe: yes (lock-free: the clock's read path, a bounded
        /// seqlock sample, atomic maxima on this CPU's own state).
        pub fn steal_ns(&self) -> Result<Duration, StealError> {
            let s = self.steal.0.as_ref().map_err(|e| *e)?;
            s.steal_ns(self.now_ns())
                .map(Duration::from_nanos)
                .ok_or(StealError::Unregistered)
        }

        /// Whether the host says CPU `cpu`'s vCPU is descheduled now (KVM's
        /// `preempted` flag): a spinning waiter whose lock holder's vCPU is
        /// preempted should yield. `None` without steal time on that CPU.
        ///
        /// Interrupt-safe: yes (one load).
        pub fn preempted(&self, cpu: usize) -> Option<bool> {
            self.steal.0.as_ref().ok()?.preempted(cpu)
        }

        /// The steal-time backend (its counters of refused readings), or
        /// why there is none.
        ///
        /// Interrupt-safe: yes.
        pub fn steal_time(&self) -> Result<&StealTime<H>, StealError> {
            self.steal.0.as_ref().map_err(|e| *e)
        }
    }
}

#[cfg(not(feature = "kvmclock"))]
mod disabled {
    use crate::settings::StealSetup;
    use crate::CpuError;
    use clockhal_x86::Hardware;

    #[derive(Debug)]
    pub(crate) struct Steal<H>(core::marker::PhantomData<H>);

    impl<H: Hardware + Clone> Steal<H> {
        pub(crate) fn probe(_: &H, _: StealSetup) -> Steal<H> {
            Steal(core::marker::PhantomData)
        }
        pub(crate) fn register_this_cpu(&self, _: impl FnOnce() -> u64) -> Result<(), CpuError> {
            Ok(())
        }
        pub(crate) fn unregister_this_cpu(&self) {}
        pub(crate) fn resume_this_cpu(&self, _: impl FnOnce() -> u64) -> Result<(), CpuError> {
            Ok(())
        }
    }
}
