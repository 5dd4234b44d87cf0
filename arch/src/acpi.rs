//! ACPI discovery of the HPET and the PM timer (in progress).
