//! clockhal hpet backend (in progress).
#![no_std]
