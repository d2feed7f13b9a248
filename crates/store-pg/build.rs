//! Rebuilds the crate when a migration changes, so the embedded migrations stay current, and gives the build a
//! digest of the migrations it embeds (`ALMANAC_MIGRATIONS_DIGEST`, see `migrations_digest`): their folders' names
//! and `up.sql`, read here in the same build that embeds them.
use std::fs;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
    let dir = Path::new("../../migrations");
    let mut folders: Vec<_> = fs::read_dir(dir)
        .expect("the migrations folder is readable")
        .map(|entry| entry.expect("the migrations folder is readable").path())
        .filter(|path| path.join("up.sql").is_file())
        .collect();
    folders.sort();
    // FNV-1a, 64 bits: stable across builds and toolchains, and enough to tell two sets of migrations apart.
    let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
    for folder in folders {
        let name = folder.file_name().expect("a folder has a name").to_string_lossy().into_owned();
        let up = fs::read(folder.join("up.sql")).expect("a migration's up.sql is readable");
        for byte in name.bytes().chain([0]).chain(up).chain([0]) {
            digest = (digest ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    println!("cargo:rustc-env=ALMANAC_MIGRATIONS_DIGEST={digest:016x}");
}
