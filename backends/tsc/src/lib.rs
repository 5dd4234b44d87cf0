//! clockhal tsc backend (in progress).
#![no_std]
