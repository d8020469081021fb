//! Fuzz target `pmi`: feeds each input to [`scored_fuzz::pmi::check`],
//! which panics when a property fails. See that module for the properties.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| scored_fuzz::pmi::check(data));
