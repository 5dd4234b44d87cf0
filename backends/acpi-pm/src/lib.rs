//! clockhal acpi-pm backend (in progress).
#![no_std]
