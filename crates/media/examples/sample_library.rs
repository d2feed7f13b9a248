//! Writes the demo's sample library into the folder given: `cargo run -p almanac-media --features fixtures
//! --example sample_library -- DIR`. Prints one line saying what it made.

use std::path::{Path, PathBuf};

use almanac_media::fixtures::{self, FixtureExif};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let dir = std::env::args().nth(1).ok_or("usage: sample_library DIR")?;
    println!("{}", generate_library(Path::new(&dir))?);
    Ok(())
}

fn generate_library(root: &Path) -> Result<String> {
    let write = |rel: &str, bytes: &[u8]| -> Result<PathBuf> {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().expect("a folder"))?;
        std::fs::write(&path, bytes)?;
        Ok(path)
    };
    let camera = |date: &str| FixtureExif { gps: Some((48.8584, 2.2945)), ..FixtureExif::camera(date, "+02:00") };
    let mut n = 0;
    for (i, date) in
        ["2019:07:04 10:00:00", "2020:07:04 18:30:00", "2021:12:24 20:00:00", "2022:05:01 09:15:00"].iter().enumerate()
    {
        write(&format!("{}/IMG_{i:04}.JPG", &date[..4]), &fixtures::jpeg(2400, 1600, i as u32, true, &camera(date)))?;
        n += 1;
    }
    let rotated = FixtureExif { orientation: Some(6), ..camera("2023:08:15 14:00:00") };
    write("2023/IMG_0100.JPG", &fixtures::jpeg(2400, 1600, 100, false, &rotated))?;
    for shot in 0..4 {
        let exif = FixtureExif { subsec_original: Some(format!("{}", shot * 3)), ..camera("2023:08:15 14:05:00") };
        write(&format!("2023/burst/IMG_02{shot:02}.JPG"), &fixtures::jpeg(1600, 1200, 200 + shot, shot == 1, &exif))?;
    }
    write("2023/screenshot.png", &fixtures::png(800, 600, 7))?;
    write("2023/no-exif.jpg", &fixtures::jpeg(640, 480, 8, false, &FixtureExif::default()))?;
    let damaged = fixtures::jpeg(1200, 800, 9, true, &FixtureExif::default());
    write("2023/damaged.jpg", &damaged[..damaged.len() / 4])?;
    write("2023/notes.txt", b"not a photo")?;
    write("@eaDir/IMG_0000.JPG/SYNOPHOTO_THUMB_XL.jpg", b"NAS thumbnail, skipped")?;
    n += 8;
    let mut extras = vec!["a burst of 4", "a rotated photo", "a damaged file", "NAS system folder"];
    if fixtures::have_ffmpeg() {
        write("2024/IMG_0300.JPG", &fixtures::jpeg(1600, 1200, 300, false, &camera("2024:06:01 12:00:00")))?;
        fixtures::video(&root.join("2024/IMG_0300.MOV"), 1.5, 640, 480, "2024-06-01T10:00:01Z");
        fixtures::video(&root.join("2024/clip.mp4"), 3.0, 1280, 720, "2024-06-02T09:00:00Z");
        n += 3;
        extras.push("a Live Photo pair and a video");
    } else {
        extras.push("no video: ffmpeg is not installed");
    }
    Ok(format!("{n} files in {} ({})", root.display(), extras.join(", ")))
}
