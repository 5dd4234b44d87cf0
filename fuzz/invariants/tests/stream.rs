//! The invariant checks on stable: a fixed pseudo-random stream of inputs
//! per target, mutations of the ACPI seeds, and a replay of the committed
//! libFuzzer corpus (`fuzz/corpus/<target>/`).

use clockhal_invariants::{acpi, TARGETS};
use std::path::{Path, PathBuf};

/// Inputs per target from the random stream.
const STREAM_CASES: usize = 4_000;
/// Mutated copies of each ACPI seed.
const ACPI_MUTATIONS: usize = 2_000;

/// splitmix64: a fixed, portable stream.
struct Stream(u64);

impl Stream {
    fn new(seed: &str) -> Stream {
        Stream(seed.bytes().fold(0x5eed_c10c_4a11_0018, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        }))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn random_stream() {
    for &(name, check) in TARGETS {
        let mut s = Stream::new(name);
        for _ in 0..STREAM_CASES {
            let len = (s.next() % 512) as usize;
            check(&s.bytes(len));
        }
        println!("{name}: {STREAM_CASES} random inputs");
    }
}

#[test]
fn acpi_seed_mutations() {
    let mut s = Stream::new("acpi-mutations");
    for (name, seed) in acpi::seeds() {
        acpi::check(&seed);
        for _ in 0..ACPI_MUTATIONS {
            let mut input = seed.clone();
            // Fix checksums in most cases so mutations reach the fields.
            input[0] = (s.next() as u8) | u8::from(s.next() % 4 != 0);
            for _ in 0..1 + s.next() % 4 {
                let at = 13 + (s.next() as usize) % (input.len() - 13);
                input[at] = s.next() as u8;
            }
            if s.next() % 8 == 0 {
                input.truncate(13 + (s.next() as usize) % (seed.len() - 13));
            }
            acpi::check(&input);
        }
        println!("acpi: {ACPI_MUTATIONS} mutations of seed {name}");
    }
}

/// The seed files libFuzzer starts from are the simulator's tables
/// (regenerate with `CLOCKHAL_WRITE_SEEDS=1`).
#[test]
fn acpi_seed_files_match_the_simulator() {
    let dir = fuzz_dir().join("seeds/acpi");
    for (name, seed) in acpi::seeds() {
        let path = dir.join(name);
        if std::env::var_os("CLOCKHAL_WRITE_SEEDS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &seed).unwrap();
        }
        let file = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(file == seed, "{} is stale", path.display());
    }
}

#[test]
fn corpus_replay() {
    for &(name, check) in TARGETS {
        let dir = fuzz_dir().join("corpus").join(name);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("no corpus for {name} at {}: {e}", dir.display()));
        let mut n = 0;
        for entry in entries {
            let path = entry.unwrap().path();
            check(&std::fs::read(&path).unwrap());
            n += 1;
        }
        assert!(n > 0, "empty corpus for {name}");
        println!("{name}: {n} corpus inputs replayed");
    }
}
