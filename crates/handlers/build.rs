//! Gives the build a digest of the sources that decide a file's fate in a crawl (`ALMANAC_READING_DIGEST`): the media
//! crate's readers and decoders and the crawl's own code. A file remembered as failed is read again by a Worker built
//! from other sources (`crawl/failed.rs`, `read_by`), so a fix to a decoder reaches the files it failed before.
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    let folders = [Path::new("../media/src"), Path::new("src/crawl")];
    let mut files = Vec::new();
    for folder in folders {
        println!("cargo:rerun-if-changed={}", folder.display());
        gather(folder, &mut files);
    }
    files.sort();
    // FNV-1a, 64 bits: stable across builds and toolchains, as the migrations' digest (store-pg's build.rs).
    let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
    for file in files {
        let name = file.to_string_lossy().into_owned();
        let body = fs::read(&file).expect("a source file is readable");
        for byte in name.bytes().chain([0]).chain(body).chain([0]) {
            digest = (digest ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    println!("cargo:rustc-env=ALMANAC_READING_DIGEST={digest:016x}");
}

/// The files under `folder`, at any depth.
fn gather(folder: &Path, into: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(folder).expect("a source folder is readable") {
        let path = entry.expect("a source folder is readable").path();
        if path.is_dir() {
            gather(&path, into);
        } else {
            into.push(path);
        }
    }
}
