//! EXIF as real writers damage it, built byte by byte: every field that is still valid is kept.

use almanac_domain::CaptureSource;
use almanac_media::fixtures::exif_block::{self, Block, E, V};
use almanac_media::{ExifFacts, read_exif};
use chrono::{TimeZone, Utc};

/// What the camera block says, checked field by field; `lost` names the fields the damage took.
fn assert_kept(facts: &ExifFacts, lost: &[&str], case: &str) {
    let date = facts.dates.iter().find(|d| d.source == CaptureSource::ExifOriginal);
    if lost.contains(&"date") {
        assert!(date.is_none(), "{case}: {facts:?}");
    } else {
        let date = date.unwrap_or_else(|| panic!("{case}: the original date is lost: {facts:?}"));
        let expected = Utc.with_ymd_and_hms(2019, 7, 4, 16, 30, 5).unwrap() + chrono::Duration::milliseconds(250);
        assert_eq!((date.at, date.offset_minutes), (expected, Some(120)), "{case}");
    }
    let m = &facts.metadata;
    let check = |name: &str, got: Option<&str>, want: &str| {
        if lost.contains(&name) {
            assert_eq!(got, None, "{case}: {name}");
        } else {
            assert_eq!(got, Some(want), "{case}: {name}");
        }
    };
    check("make", m.camera_make.as_deref(), "Almanac");
    check("model", m.camera_model.as_deref(), "Broken Writer 3000");
    check("lens", m.lens_model.as_deref(), "50mm f/1.8");
    if !lost.contains(&"orientation") {
        assert_eq!((facts.orientation, m.orientation_degrees), (6, 90), "{case}: orientation");
    }
    if !lost.contains(&"gps") {
        let lat = m.gps_latitude.unwrap_or_else(|| panic!("{case}: latitude lost"));
        assert!((lat + 33.8667).abs() < 1e-3, "{case}: {lat}");
    }
}

fn both_orders(f: impl Fn(&mut Block)) -> Vec<(Block, &'static str)> {
    [(true, "little-endian"), (false, "big-endian")]
        .into_iter()
        .map(|(le, name)| {
            let mut b = Block::camera(le);
            f(&mut b);
            (b, name)
        })
        .collect()
}

#[test]
fn an_intact_block_in_either_byte_order() {
    for (block, order) in both_orders(|_| {}) {
        assert_kept(&read_exif(&exif_block::jpeg(&block.bytes(), false)), &[], order);
    }
}

#[test]
fn a_sub_ifd_without_its_next_ifd_pointer_keeps_every_field() {
    for (block, order) in both_orders(|b| b.exif_without_next_pointer = true) {
        let facts = read_exif(&exif_block::jpeg(&block.bytes(), false));
        assert_kept(&facts, &[], order);
        assert_eq!(facts.metadata.camera_make.as_deref(), Some("Almanac"), "burst detection needs make and model");
    }
}

#[test]
fn a_value_past_the_end_loses_only_that_field() {
    for (block, order) in both_orders(|b| b.ifd0[1].offset = Some(0xFFFF_0000)) {
        assert_kept(&read_exif(&exif_block::jpeg(&block.bytes(), false)), &["model"], order);
    }
}

#[test]
fn a_wrong_count_loses_only_that_field() {
    for (block, order) in both_orders(|b| b.exif[3].count = Some(1_000_000)) {
        assert_kept(&read_exif(&exif_block::jpeg(&block.bytes(), false)), &["lens"], order);
    }
}

#[test]
fn a_maker_note_pointing_outside_loses_only_the_note() {
    for (block, order) in both_orders(|b| {
        let mut note = E::new(exif_block::MAKER_NOTE, V::Undefined(vec![0x41; 64]));
        note.offset = Some(0x7FFF_FFF0);
        b.exif.insert(1, note);
    }) {
        assert_kept(&read_exif(&exif_block::jpeg(&block.bytes(), false)), &[], order);
    }
}

#[test]
fn wrong_types_are_read_for_what_they_hold() {
    for (block, order) in both_orders(|b| {
        // The date as UNDEFINED bytes instead of ASCII, the orientation as a LONG instead of a SHORT.
        b.exif[0].typ = Some(7);
        b.ifd0[2] = E::new(exif_block::ORIENTATION, V::Long(6));
    }) {
        assert_kept(&read_exif(&exif_block::jpeg(&block.bytes(), false)), &[], order);
    }
}

#[test]
fn duplicate_tags_keep_the_first() {
    for (block, order) in both_orders(|b| b.ifd0.insert(1, E::ascii(exif_block::MAKE, "Second Make"))) {
        assert_kept(&read_exif(&exif_block::jpeg(&block.bytes(), false)), &[], order);
    }
}

#[test]
fn a_date_written_into_ifd0_instead_of_the_exif_ifd_is_still_the_original_date() {
    for (block, order) in both_orders(|b| {
        let moved: Vec<E> = b.exif.drain(..3).collect();
        b.ifd0.extend(moved);
    }) {
        assert_kept(&read_exif(&exif_block::jpeg(&block.bytes(), false)), &[], order);
    }
}

#[test]
fn a_block_cut_short_keeps_what_came_before_the_cut() {
    for (block, order) in both_orders(|_| {}) {
        let bytes = block.bytes();
        // The Exif IFD is written last; cut its last entry (the lens) and the next-IFD pointer.
        let cut = &bytes[..bytes.len() - 16];
        assert_kept(&read_exif(&exif_block::jpeg(cut, false)), &["lens"], order);
    }
}

#[test]
fn jfif_before_exif_and_a_damaged_segment_before_exif() {
    let block = Block::camera(false).bytes();
    assert_kept(&read_exif(&exif_block::jpeg(&block, true)), &[], "JFIF APP0 first");
    // An APP2 segment whose length runs past the end of the file: the segment walk loses its way, and the
    // EXIF block is found by its signature instead.
    let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xE2, 0xFF, 0xFF, 1, 2, 3];
    jpeg.extend_from_slice(&exif_block::app1(&block));
    jpeg.extend_from_slice(&[0xFF, 0xD9]);
    assert_kept(&read_exif(&jpeg), &[], "damaged APP2 before the EXIF");
}

#[test]
fn exif_in_png_webp_and_tiff_containers() {
    for (block, order) in both_orders(|b| b.exif_without_next_pointer = true) {
        let bytes = block.bytes();
        assert_kept(&read_exif(&exif_block::png(&bytes)), &[], &format!("PNG, {order}"));
        assert_kept(&read_exif(&exif_block::webp(&bytes)), &[], &format!("WebP, {order}"));
        assert_kept(&read_exif(&bytes), &[], &format!("TIFF, {order}"));
    }
}

#[test]
fn the_containers_still_decode() {
    let bytes = Block::camera(true).bytes();
    let png = image::load_from_memory_with_format(&exif_block::png(&bytes), image::ImageFormat::Png).unwrap();
    assert_eq!((png.width(), png.height()), (32, 24));
    let webp = image::load_from_memory_with_format(&exif_block::webp(&bytes), image::ImageFormat::WebP).unwrap();
    assert_eq!((webp.width(), webp.height()), (32, 24));
}

#[test]
fn no_block_and_garbage_give_upright_facts_without_dates() {
    for bytes in [&b""[..], b"\xFF\xD8\xFF\xE1\x00\x08Exif\0\0", b"II*\0\xFF\xFF\xFF\xFF", b"MM\0*\0\0\0\x08\xFF\xFF"] {
        let facts = read_exif(bytes);
        assert_eq!((facts.orientation, facts.dates.len()), (1, 0), "{bytes:?}");
    }
}

#[test]
fn a_fraction_in_the_date_text_is_not_added_twice() {
    for (block, order) in
        both_orders(|b| b.exif[0] = E::ascii(exif_block::DATE_TIME_ORIGINAL, "2019:07:04 18:30:05.25"))
    {
        assert_kept(&read_exif(&exif_block::jpeg(&block.bytes(), false)), &[], order);
    }
}
