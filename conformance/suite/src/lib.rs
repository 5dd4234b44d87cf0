//! Conformance suite (in progress).
#![no_std]
