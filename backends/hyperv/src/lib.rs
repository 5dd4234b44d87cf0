//! clockhal hyperv backend (in progress).
#![no_std]
