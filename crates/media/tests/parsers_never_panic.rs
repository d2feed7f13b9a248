//! Hostile input stays harmless: the EXIF, MakerNote, XMP and file-name parsers get random and mutated
//! inputs and must neither panic nor hang (proptest; each case is bounded by the parsers' own limits).

use almanac_domain::CaptureSource;
use almanac_media::fixtures::exif_block::{self, Block};
use almanac_media::{date_in_file_name, embedded_xmp_date, read_apple_note, read_exif, xmp_date};
use proptest::prelude::*;

/// A valid input with some bytes overwritten, some cut, some inserted.
fn mutated(base: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = base.len();
    (
        proptest::collection::vec((0..len, any::<u8>()), 0..16),
        0..=len,
        proptest::collection::vec(any::<u8>(), 0..8),
        0..=len,
    )
        .prop_map(move |(writes, cut, insert, at)| {
            let mut b = base.clone();
            for (i, v) in writes {
                if i < b.len() {
                    b[i] = v;
                }
            }
            b.truncate(cut.max(1));
            let at = at.min(b.len());
            b.splice(at..at, insert);
            b
        })
}

const SIDECAR: &str = r#"<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description xmlns:exif="http://ns.adobe.com/exif/1.0/" exif:DateTimeOriginal="2019-07-04T18:30:05+02:00"/></rdf:RDF></x:xmpmeta>"#;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn exif_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let facts = read_exif(&bytes);
        prop_assert!((1..=8).contains(&facts.orientation));
    }

    #[test]
    fn exif_never_panics_on_mutated_blocks(block in mutated(Block::camera(true).bytes()), big in mutated(Block::camera(false).bytes())) {
        for b in [&block, &big] {
            let facts = read_exif(&exif_block::jpeg(b, true));
            prop_assert!((1..=8).contains(&facts.orientation));
            let _ = read_exif(b);
            let _ = read_exif(&exif_block::png(b));
        }
    }

    #[test]
    fn maker_notes_never_panic(note in mutated(almanac_media::apple_note(Some("BURST-1"), Some("LIVE-1")))) {
        let _ = read_apple_note(&note);
    }

    #[test]
    fn xmp_never_panics(packet in mutated(SIDECAR.as_bytes().to_vec()), noise in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = xmp_date(&packet, CaptureSource::XmpSidecar);
        let _ = embedded_xmp_date(&[noise.as_slice(), &packet, &noise].concat());
    }

    #[test]
    fn file_names_never_panic(name in "\\PC{0,40}", digits in "[0-9_ .:-]{0,30}") {
        let _ = date_in_file_name(&name);
        if let Some(c) = date_in_file_name(&digits) {
            prop_assert_eq!(c.source, CaptureSource::FileName);
        }
    }
}
