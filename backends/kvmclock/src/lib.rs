//! clockhal kvmclock backend (in progress).
#![no_std]
